package conntrackd

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/netnstest"
)

// TestReadTableSizeIsTheNamespaces: the table size sync defaults to is the namespace's
// nf_conntrack_max, DefaultTableSize where conntrack is not loaded.
func TestReadTableSizeIsTheNamespaces(t *testing.T) {
	netnstest.Run(t, func() {
		want := DefaultTableSize
		if b, err := os.ReadFile("/proc/sys/net/netfilter/nf_conntrack_max"); err == nil {
			if want, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
				t.Fatal(err)
			}
		}
		if got := readTableSize(); got != want {
			t.Errorf("table size %d, want %d", got, want)
		}
	})
}
