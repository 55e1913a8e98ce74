package cli

import (
	"strings"
	"testing"
)

// TestPortlessBackendsAreNamedByAddress: a backend without a port (dsr's) is named by its address
// alone in what adding it answers and records ("10.0.0.3", never "10.0.0.3:0").
func TestPortlessBackendsAreNamedByAddress(t *testing.T) {
	url, _ := fakeDaemon(t, "services:\n  - name: web\n    vip: 192.0.2.10\n    port: 80\n    mode: dsr\n    backends: [{address: 10.0.0.1}]\n")
	var said strings.Builder
	for _, args := range [][]string{{"backend", "add", "web", "10.0.0.3"}, {"backend", "add", "web", "10.0.0.3"}, {"events"}} {
		out, err := sluiceCLI(t, "", append([]string{"--api", url}, args...)...)
		said.WriteString(out)
		if err != nil {
			said.WriteString(err.Error() + "\n")
		}
	}
	for _, want := range []string{"api: add backend 10.0.0.3 to web", "backend 10.0.0.3 of service web: already exists"} {
		if !strings.Contains(said.String(), want) {
			t.Errorf("no %q in:\n%s", want, said.String())
		}
	}
	if strings.Contains(said.String(), "10.0.0.3:0") {
		t.Errorf("a backend without a port named with port 0:\n%s", said.String())
	}
}
