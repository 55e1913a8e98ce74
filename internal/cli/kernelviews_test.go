package cli

import (
	"testing"

	"github.com/sluicelb/sluice/internal/datapath"
)

// TestKernelViewsNameBackendsAsTheDaemon: a listing without a daemon gives each backend the id the
// daemon gives it (address, or address:port when the backend has a port of its own), so scripts
// reading `sluice list -o json` see one id either way; the refusals come along.
func TestKernelViewsNameBackendsAsTheDaemon(t *testing.T) {
	refused := datapath.Refusals{Connections: 4}
	views := kernelViews([]datapath.ServiceStatus{{Name: "web", Backends: []datapath.BackendStatus{
		{Address: "10.91.2.11"}, {Address: "10.91.2.12", Port: 8080, Connections: 9, Overloaded: true}, {Address: "fd00::1", Port: 80},
	}, Refused: refused}})
	if views[0].Refused != refused {
		t.Errorf("refusals %+v, want %+v", views[0].Refused, refused)
	}
	if b := views[0].Backends[1]; b.State != "overloaded" || b.Connections != 9 {
		t.Errorf("a backend the datapath reports overloaded: %+v", b)
	}
	var ids []string
	for _, b := range views[0].Backends {
		ids = append(ids, b.ID)
	}
	want := []string{"10.91.2.11", "10.91.2.12:8080", "[fd00::1]:80"}
	for i := range want {
		if ids[i] != want[i] {
			t.Errorf("ids %q, want %q", ids, want)
			break
		}
	}
}
