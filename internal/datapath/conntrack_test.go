package datapath

import (
	"os"
	"runtime"
	"testing"

	"github.com/vishvananda/netns"
)

// TestConntrackFillReadsTheNamespace: the fill of a new network namespace's table is its own
// (empty), with the kernel's maximum.
func TestConntrackFillReadsTheNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a network namespace")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.New()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic(err) // never leave the thread in the test namespace
		}
		ns.Close()
	}()
	count, max, err := ConntrackFill()
	if err != nil {
		t.Fatal(err)
	}
	if _, statErr := os.Stat(conntrackSysctls + "nf_conntrack_max"); statErr != nil {
		if count != 0 || max != 0 {
			t.Fatalf("without conntrack: %d of %d, want 0 of 0", count, max)
		}
		return
	}
	if count != 0 || max == 0 {
		t.Fatalf("a new namespace's table: %d of %d entries, want 0 of some", count, max)
	}
}
