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

// TestCheckLiberalTCP: a namespace that checks TCP windows is refused, naming the sysctl and the
// command; one in liberal mode passes.
func TestCheckLiberalTCP(t *testing.T) {
	netnstest.Run(t, func() {
		const path = "/proc/sys/net/netfilter/nf_conntrack_tcp_be_liberal"
		if _, err := os.Stat(path); err != nil {
			t.Skipf("conntrack is not loaded here: %v", err)
		}
		if err := os.WriteFile(path, []byte("0"), 0o644); err != nil {
			t.Fatal(err)
		}
		err := CheckLiberalTCP()
		if err == nil || !strings.Contains(err.Error(), "sync: "+LiberalSysctl+" is 0") || !strings.Contains(err.Error(), "sysctl -w "+LiberalSysctl+"=1") {
			t.Errorf("window tracking on: %v", err)
		}
		if err := os.WriteFile(path, []byte("1"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := CheckLiberalTCP(); err != nil {
			t.Errorf("liberal: %v", err)
		}
	})
}
