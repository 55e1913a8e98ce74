package health

import (
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/netnstest"
	"github.com/sluicelb/sluice/internal/testutil"
)

// ping runs an icmp check of addr.
func ping(t *testing.T, addr netip.Addr, timeout time.Duration) Result {
	t.Helper()
	r := check(t, config.HealthCheck{Type: config.CheckICMP}, netip.AddrPortFrom(addr, 0), timeout)
	if strings.HasPrefix(r.Message, "cannot open an ICMP socket") {
		testutil.Missing(t, "needs root or net.ipv4.ping_group_range: %s", r.Message)
	}
	return r
}

func TestICMP(t *testing.T) {
	forEachLoopback(t, func(t *testing.T, loopback netip.Addr) {
		wantResult(t, ping(t, loopback, probeTimeout), true, "echo reply")
	})
}

// TestICMPNoReply pings the loopback addresses of a namespace of its own, with ping sockets
// allowed and not (a raw socket), while the namespace answers echo requests and while it
// ignores them.
func TestICMPNoReply(t *testing.T) {
	for _, sockets := range []struct{ name, groups string }{
		{"ping socket", "0 2147483647"},
		{"raw socket", "1 0"},
	} {
		for _, addr := range []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()} {
			ignore := "net/ipv4/icmp_echo_ignore_all"
			if addr.Is6() {
				ignore = "net/ipv6/icmp/echo_ignore_all"
			}
			t.Run(sockets.name+"/"+addr.String(), func(t *testing.T) {
				host := threadNetns(t)
				// No t.Run below: a subtest would run on another thread, outside the namespace.
				netnstest.Run(t, func() {
					lo, err := netlink.LinkByName("lo")
					if err != nil {
						t.Fatal(err)
					}
					if err := netlink.LinkSetUp(lo); err != nil {
						t.Fatal(err)
					}
					setSysctl(t, host, "net/ipv4/ping_group_range", sockets.groups)
					wantResult(t, ping(t, addr, probeTimeout), true, "echo reply")
					setSysctl(t, host, ignore, "1")
					wantResult(t, ping(t, addr, 100*time.Millisecond), false, "no echo reply: timed out after 100ms")
				})
			})
		}
	}
}

// threadNetns names the network namespace of the calling thread.
func threadNetns(t *testing.T) string {
	t.Helper()
	ns, err := os.Readlink("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// setSysctl writes a sysctl of the network namespace of the calling thread, which must be a
// namespace of the test's own, not host, the one the test started in.
func setSysctl(t *testing.T, host, name, value string) {
	t.Helper()
	if own := threadNetns(t); own == host {
		t.Fatalf("refusing to set %s outside a test namespace (the thread is in %s)", name, own)
	}
	if err := os.WriteFile("/proc/sys/"+name, []byte(value), 0o644); err != nil {
		t.Fatal(err)
	}
}
