package datapath

import (
	"os"
	"testing"

	"github.com/sluicelb/sluice/internal/netnstest"
)

// procSys holds the sysctls of the calling thread's network namespace.
const procSys = "/proc/sys/"

// TestConntrackFillReadsTheNamespace: the fill of a new network namespace's table is its own
// (empty), with the kernel's maximum.
func TestConntrackFillReadsTheNamespace(t *testing.T) {
	netnstest.Run(t, func() {
		count, max, err := ConntrackFill()
		if err != nil {
			t.Fatal(err)
		}
		if _, statErr := os.Stat(procSys + "net/netfilter/nf_conntrack_max"); statErr != nil {
			if count != 0 || max != 0 {
				t.Fatalf("without conntrack: %d of %d, want 0 of 0", count, max)
			}
			return
		}
		if count != 0 || max == 0 {
			t.Fatalf("a new namespace's table: %d of %d entries, want 0 of some", count, max)
		}
	})
}
