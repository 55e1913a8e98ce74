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

// TestPrintBGPShowsBFD: each peer's BFD state shows, "off" for a peer without BFD.
func TestPrintBGPShowsBFD(t *testing.T) {
	v := engine.BGPView{Enabled: true, ASN: 65100, RouterID: "10.9.0.11", ListenPort: -1, Peers: []engine.PeerView{
		{Address: "10.9.0.1", ASN: 65000, State: "established", BFD: "up"},
		{Address: "10.9.0.2", ASN: 65000, State: "established"},
	}}
	var out bytes.Buffer
	if err := printBGP(&out, v, time.Now()); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	for i, want := range map[int][]string{2: {"BFD"}, 3: {"10.9.0.1", " up "}, 4: {"10.9.0.2", " off "}} {
		for _, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("line %d lacks %q:\n%s", i, w, out.String())
			}
		}
	}
}
