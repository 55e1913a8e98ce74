package nft

import (
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// TestKernelFullNATSource balances a fullnat service with a fullnat_source that no interface of
// the balancer holds (a backup's VRRP address before it takes over): the backend sees the
// connection come from that address, and its replies, routed to the balancer (the operator's
// part: VRRP makes the address the master's), are translated back to the client. A service
// without one still masquerades to the address towards the backends.
func TestKernelFullNATSource(t *testing.T) {
	const floating = "10.91.2.250"
	inFreshNetns(t, func() {
		client, backends := natTopology(t)
		in(t, backends, func() {
			serveRemoteAddr(t, ":81")
			// The floating address lives on the balancer: the backends route to it through it.
			if err := netlink.RouteAdd(&netlink.Route{Dst: hostPrefix(floating), Gw: net.ParseIP("10.91.2.1")}); err != nil {
				t.Fatal(err)
			}
		})
		if addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4); err != nil || hasAddr(addrs, floating) {
			t.Fatalf("the balancer holds %s already (%v): the test needs it not local", floating, err)
		}
		d := newTestDatapath(t)
		sourced, plain := service("sourced", "tcp", "10.91.9.100", 81, 81), service("plain", "tcp", "10.91.9.101", 81, 81)
		sourced.FullNATSource = netip.MustParseAddr(floating)
		apply(t, d, twoBackendPlan("fullnat", 0, plain, sourced))
		for vip, want := range map[string]string{"10.91.9.100:81": floating, "10.91.9.101:81": "10.91.2.1"} {
			if got := remoteAddrFrom(t, client, vip); got != want {
				t.Errorf("through %s the backend saw the connection from %q, want %s", vip, got, want)
			}
		}
	})
}

// hostPrefix is the /32 of an IPv4 address.
func hostPrefix(addr string) *net.IPNet {
	return &net.IPNet{IP: net.ParseIP(addr), Mask: net.CIDRMask(32, 32)}
}

func hasAddr(addrs []netlink.Addr, addr string) bool {
	for _, a := range addrs {
		if a.IP.String() == addr {
			return true
		}
	}
	return false
}

// serveRemoteAddr answers each TCP connection on addr with the address it came from, then closes it.
func serveRemoteAddr(t *testing.T, addr string) {
	l, err := net.Listen("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, c.RemoteAddr().(*net.TCPAddr).IP.String())
			c.Close()
		}
	}()
}

// remoteAddrFrom connects to addr from ns and returns what serveRemoteAddr answered.
func remoteAddrFrom(t *testing.T, ns netns.NsHandle, addr string) string {
	t.Helper()
	var c net.Conn
	var err error
	in(t, ns, func() { c, err = net.DialTimeout("tcp4", addr, echoTimeout) })
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(echoTimeout))
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("reading from %s: %v", addr, err)
	}
	return string(got)
}
