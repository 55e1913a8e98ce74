package bench

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/lab"
	"github.com/sluicelb/sluice/internal/testutil"
)

// tcpFlow is an established TCP flow from src to dst, port 40000 to 80, and its reply.
func tcpFlow(family netlink.InetFamily, src, dst string) *netlink.ConntrackFlow {
	tuple := func(from, to string, sport, dport uint16) netlink.IPTuple {
		return netlink.IPTuple{SrcIP: net.ParseIP(from), DstIP: net.ParseIP(to), SrcPort: sport, DstPort: dport, Protocol: unix.IPPROTO_TCP}
	}
	return &netlink.ConntrackFlow{FamilyType: uint8(family), Forward: tuple(src, dst, 40000, 80), Reverse: tuple(dst, src, 80, 40000),
		TimeOut: 300, ProtoInfo: &netlink.ProtoInfoTCP{State: nl.TCP_CONNTRACK_ESTABLISHED}}
}

// TestFlushConntrackBothFamilies: the flush the benchmarks run between candidates forgets the
// IPv4 and the IPv6 flows of the namespace it names, as `conntrack -F` did.
func TestFlushConntrackBothFamilies(t *testing.T) {
	if os.Geteuid() != 0 {
		testutil.Missing(t, "needs root to make a network namespace")
	}
	ns := fmt.Sprintf("sluice-bench-ct-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	count := func() (n int) {
		err := lab.WithHandle(ns, func(h *netlink.Handle) error {
			for _, family := range []netlink.InetFamily{unix.AF_INET, unix.AF_INET6} {
				flows, err := h.ConntrackTableList(netlink.ConntrackTable, family)
				n += len(flows)
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	err := lab.WithHandle(ns, func(h *netlink.Handle) error {
		if err := h.ConntrackCreate(netlink.ConntrackTable, unix.AF_INET, tcpFlow(unix.AF_INET, "10.91.1.2", "10.91.9.100")); err != nil {
			return err
		}
		return h.ConntrackCreate(netlink.ConntrackTable, unix.AF_INET6, tcpFlow(unix.AF_INET6, "fd00:91:1::2", "fd00:91:9::100"))
	})
	if err != nil {
		t.Fatalf("creating the flows: %v", err)
	}
	if n := count(); n != 2 {
		t.Fatalf("%d flows before the flush, want 2", n)
	}
	if err := flushConntrack(ns); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Errorf("%d flows after the flush, want 0", n)
	}
	if err := flushConntrack(ns + "-none"); err == nil {
		t.Error("a namespace that does not exist flushed without an error")
	}
}
