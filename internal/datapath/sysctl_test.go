package datapath

import (
	"testing"

	"github.com/prometheus/procfs"
)

func fakeProc(t *testing.T, dir string) procfs.FS {
	t.Helper()
	proc, err := procfs.NewFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	return proc
}

// TestConntrackFillFromSysctls: the fill is read from the two sysctls; without conntrack (no
// nf_conntrack_count) it is 0 of 0, not an error.
func TestConntrackFillFromSysctls(t *testing.T) {
	if count, max, err := conntrackFill(fakeProc(t, "testdata/proc")); err != nil || count != 17 || max != 262144 {
		t.Errorf("fill %d of %d, %v; want 17 of 262144", count, max, err)
	}
	if count, max, err := conntrackFill(fakeProc(t, "testdata/noconntrack")); err != nil || count != 0 || max != 0 {
		t.Errorf("without conntrack: %d of %d, %v; want 0 of 0", count, max, err)
	}
}

// TestReadSysctl: a sysctl holding other than one number is an error naming it.
func TestReadSysctl(t *testing.T) {
	proc := fakeProc(t, "testdata/proc")
	for _, name := range []string{"net.core.two", "net.core.word", "net.core.none"} {
		if v, err := readSysctl(proc, name); err == nil {
			t.Errorf("%s read as %d", name, v)
		}
	}
	if on, err := readSysctl(fakeProc(t, "testdata/noconntrack"), "net.ipv4.ip_forward"); err != nil || on != 1 {
		t.Errorf("ip_forward %d, %v", on, err)
	}
}
