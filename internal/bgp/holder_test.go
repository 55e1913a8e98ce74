package bgp

import (
	"testing"

	"github.com/prometheus/procfs"
)

// TestHolderFromProc: testdata/proc is a fake /proc where port 179 listens on IPv4 (inode 5150,
// held by pid 1000) and IPv6 (5151, held by bird, pid 812), 8080 listens with no holder, and
// sshd (99) holds another socket and a connection from port 179.
func TestHolderFromProc(t *testing.T) {
	fs, err := procfs.NewFS("testdata/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		port uint16
		want string
	}{
		{179, "bird (pid 812)"}, // the first by pid, not by name ("1000" < "812")
		{8080, ""},
		{22, ""},
		{0x9C40, ""}, // an established connection's port is not a listener
	} {
		if got := holder(fs, c.port); got != c.want {
			t.Errorf("port %d: holder %q, want %q", c.port, got, c.want)
		}
	}
}
