package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/engine"
)

// TestPrintBGPTellsFailures: a bgp section the speaker refused and a peer's last error show.
func TestPrintBGPTellsFailures(t *testing.T) {
	v := engine.BGPView{Enabled: true, ASN: 65100, RouterID: "10.9.0.11", ListenPort: -1,
		Failed: "the speaker refused the bgp section (tried again at 12:00:00): bgp: listen_port: port 1790 is already taken by bird (pid 812)",
		Peers:  []engine.PeerView{{Address: "10.9.0.1", ASN: 65000, State: "active", LastError: "connect: dial tcp 10.9.0.1:179: connect: connection refused"}},
	}
	var out bytes.Buffer
	if err := printBGP(&out, v, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"bgp: NOT RUNNING THE CONFIG: the speaker refused the bgp section", "taken by bird (pid 812)", "connect: connection refused"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
