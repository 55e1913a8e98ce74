package netnstest

import (
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// End is one end of the veth Joined makes: its name and the addresses it is given.
type End struct {
	Name  string
	Addrs []netip.Prefix
}

// Joined returns two new network namespaces joined by a veth (no link to the caller's
// namespace), its ends a in the first and b in the second, up with their addresses and loopback.
// It skips the test without root.
func Joined(t testing.TB, a, b End) (nsA, nsB netns.NsHandle) {
	t.Helper()
	nsA, nsB = New(t), New(t)
	Link(t, nsA, a, nsB, b)
	return nsA, nsB
}

// Link joins two network namespaces by a veth, its end a in nsA and b in nsB, up with their
// addresses and loopback.
func Link(t testing.TB, nsA netns.NsHandle, a End, nsB netns.NsHandle, b End) {
	t.Helper()
	In(t, nsA, func() {
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: a.Name}, PeerName: b.Name}); err != nil {
			t.Fatal(err)
		}
		peer, err := netlink.LinkByName(b.Name)
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetNsFd(peer, int(nsB)); err != nil {
			t.Fatal(err)
		}
		Up(t, a)
	})
	In(t, nsB, func() { Up(t, b) })
}

// Up sets loopback and e up, and gives e its addresses, in the calling thread's namespace.
func Up(t testing.TB, e End) {
	t.Helper()
	for _, name := range []string{"lo", e.Name} {
		link, err := netlink.LinkByName(name)
		if err == nil {
			err = netlink.LinkSetUp(link)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	link, err := netlink.LinkByName(e.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range e.Addrs {
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
		if err := netlink.AddrAdd(link, addr); err != nil {
			t.Fatal(err)
		}
	}
}
