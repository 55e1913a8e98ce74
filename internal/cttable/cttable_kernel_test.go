package cttable

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/ctnetlink"
	"github.com/sluicelb/sluice/internal/flowsync"
	"github.com/sluicelb/sluice/internal/netnstest"
	"github.com/sluicelb/sluice/internal/testutil"
)

// Translation bits of an entry's status (IPS_SRC_NAT, IPS_DST_NAT).
const (
	statusSrcNAT = 1 << 4
	statusDstNAT = 1 << 5
)

var (
	addrA   = netip.MustParseAddr("10.78.0.1")
	addrB   = netip.MustParseAddr("10.78.0.2")
	vip     = netip.MustParseAddrPort("192.0.2.10:80")
	backend = netip.MustParseAddrPort("10.1.0.5:8080")
	natSrc  = netip.MustParseAddrPort("10.1.0.1:40001")
)

// tcpEntry is a connection from client to the VIP in state, translated to the backend (and,
// with a valid source, from it), with timeout seconds left.
func tcpEntry(client, source netip.AddrPort, state uint8, timeout uint32) ctnetlink.Entry {
	replyTo := client
	if source.IsValid() {
		replyTo = source
	}
	return ctnetlink.Entry{
		Orig:     ctnetlink.Tuple{Proto: unix.IPPROTO_TCP, Src: client, Dst: vip},
		Reply:    ctnetlink.Tuple{Proto: unix.IPPROTO_TCP, Src: backend, Dst: replyTo},
		TCPState: state, Status: ctnetlink.StatusSeenReply | ctnetlink.StatusAssured, Timeout: timeout,
	}
}

// entries reads ns's conntrack entries by their original tuple.
func entries(t *testing.T, ns netns.NsHandle) map[ctnetlink.Tuple]ctnetlink.Entry {
	t.Helper()
	s, err := ctnetlink.Open(ns)
	must(t, err)
	defer s.Close()
	out := map[ctnetlink.Tuple]ctnetlink.Entry{}
	for _, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		must(t, s.Dump(family, func(e ctnetlink.Entry) bool {
			out[e.Orig] = e
			return true
		}))
	}
	return out
}

func create(t *testing.T, ns netns.NsHandle, es ...ctnetlink.Entry) {
	t.Helper()
	s, err := ctnetlink.Open(ns)
	must(t, err)
	defer s.Close()
	for _, e := range es {
		if err := s.Create(e); err != nil {
			t.Fatalf("creating %+v: %v", e, err)
		}
	}
}

// A node that starts takes in its peer's table: the connections it lacks (IPv4 and IPv6),
// translated as the peer's (destination and source), and not the one it tracks itself, which it
// is closing while the peer's copy is still established; nor a handshake, nor an unanswered
// datagram flow. An entry of its own that the peer's saw a packet since (the peer served the
// connection meanwhile, and it closed there) takes the peer's state.
func TestStartingNodeTakesThePeersTable(t *testing.T) {
	nsA, nsB := netnstest.Joined(t, netnstest.End{Name: "sync-a", Addrs: []netip.Prefix{netip.PrefixFrom(addrA, 24)}},
		netnstest.End{Name: "sync-b", Addrs: []netip.Prefix{netip.PrefixFrom(addrB, 24)}})

	dnat := tcpEntry(netip.MustParseAddrPort("198.51.100.1:1001"), netip.AddrPort{}, nl.TCP_CONNTRACK_ESTABLISHED, 3000)
	fullnat := tcpEntry(netip.MustParseAddrPort("198.51.100.1:1002"), natSrc, nl.TCP_CONNTRACK_ESTABLISHED, 3000)
	closingHere := tcpEntry(netip.MustParseAddrPort("198.51.100.1:1003"), netip.AddrPort{}, nl.TCP_CONNTRACK_ESTABLISHED, 3000)
	handshake := tcpEntry(netip.MustParseAddrPort("198.51.100.1:1004"), netip.AddrPort{}, nl.TCP_CONNTRACK_SYN_SENT, 100)
	handshake.Status = 0
	udp := ctnetlink.Entry{
		Orig:   ctnetlink.Tuple{Proto: unix.IPPROTO_UDP, Src: netip.MustParseAddrPort("198.51.100.2:53000"), Dst: netip.MustParseAddrPort("192.0.2.10:53")},
		Reply:  ctnetlink.Tuple{Proto: unix.IPPROTO_UDP, Src: netip.MustParseAddrPort("10.1.0.5:53"), Dst: netip.MustParseAddrPort("198.51.100.2:53000")},
		Status: ctnetlink.StatusSeenReply | ctnetlink.StatusAssured, Timeout: 100,
	}
	v6 := ctnetlink.Entry{
		Orig:     ctnetlink.Tuple{Proto: unix.IPPROTO_TCP, Src: netip.MustParseAddrPort("[2001:db8:1::1]:1005"), Dst: netip.MustParseAddrPort("[2001:db8::10]:80")},
		Reply:    ctnetlink.Tuple{Proto: unix.IPPROTO_TCP, Src: netip.MustParseAddrPort("[2001:db8:9::5]:8080"), Dst: netip.MustParseAddrPort("[2001:db8:9::1]:40002")},
		TCPState: nl.TCP_CONNTRACK_ESTABLISHED, Status: ctnetlink.StatusSeenReply | ctnetlink.StatusAssured, Timeout: 3000,
	}
	unanswered := udp
	unanswered.Orig.Src, unanswered.Reply.Dst = netip.MustParseAddrPort("198.51.100.2:53001"), netip.MustParseAddrPort("198.51.100.2:53001")
	unanswered.Status = 0
	// B served a connection of A's while A was down, and it closed there (TIME_WAIT, 10 s ago);
	// A's own entry saw its last packet 100 s ago.
	closedThere := tcpEntry(netip.MustParseAddrPort("198.51.100.1:1006"), netip.AddrPort{}, nl.TCP_CONNTRACK_TIME_WAIT, 110)
	create(t, nsB, dnat, fullnat, closingHere, handshake, udp, v6, unanswered, closedThere)
	ownClosing := closingHere
	ownClosing.TCPState, ownClosing.Timeout = nl.TCP_CONNTRACK_TIME_WAIT, 100
	ownStale := closedThere
	ownStale.TCPState, ownStale.Timeout = nl.TCP_CONNTRACK_ESTABLISHED, 5*24*3600-100
	create(t, nsA, ownClosing, ownStale)

	replicator(t, nsB, addrB, addrA)
	a := replicator(t, nsA, addrA, addrB)
	testutil.EventuallyClosed(t, "A's initial sync from B", a.InitialSyncDone())
	if is := a.Status().InitialSync; is.WithoutPeer {
		t.Fatalf("A's initial sync done without B: %+v", is)
	}

	got := entries(t, nsA)
	for name, want := range map[string]ctnetlink.Entry{"translated": dnat, "fully translated": fullnat, "datagram flow": udp, "IPv6 fully translated": v6} {
		e, ok := got[want.Orig]
		switch {
		case !ok:
			t.Errorf("%s connection not taken in", name)
		case e.Reply != want.Reply || e.TCPState != want.TCPState:
			t.Errorf("%s connection taken in as reply %v state %d, want %v state %d", name, e.Reply, e.TCPState, want.Reply, want.TCPState)
		case e.Timeout > want.Timeout || e.Timeout+30 < want.Timeout:
			t.Errorf("%s connection taken in with %d s left, want about %d", name, e.Timeout, want.Timeout)
		}
	}
	if st := got[dnat.Orig].Status; st&statusDstNAT == 0 || st&statusSrcNAT != 0 {
		t.Errorf("translated connection's status %#x: want a destination translation only", st)
	}
	if st := got[fullnat.Orig].Status; st&statusDstNAT == 0 || st&statusSrcNAT == 0 {
		t.Errorf("fully translated connection's status %#x: want both translations", st)
	}
	if e := got[closingHere.Orig]; e.TCPState != nl.TCP_CONNTRACK_TIME_WAIT || e.Timeout > 100 {
		t.Errorf("A's own closing connection after the initial sync: state %d, %d s left; want TIME_WAIT (%d), at most 100 s",
			e.TCPState, e.Timeout, nl.TCP_CONNTRACK_TIME_WAIT)
	}
	if e := got[closedThere.Orig]; e.TCPState != nl.TCP_CONNTRACK_TIME_WAIT || e.Timeout > 110 {
		t.Errorf("A's own connection that closed on B since: state %d, %d s left; want B's TIME_WAIT (%d), at most 110 s",
			e.TCPState, e.Timeout, nl.TCP_CONNTRACK_TIME_WAIT)
	}
	for name, e := range map[string]ctnetlink.Entry{"handshake": handshake, "unanswered datagram flow": unanswered} {
		if _, ok := got[e.Orig]; ok {
			t.Errorf("%s taken in", name)
		}
	}
	skipped := peerStatus(a, addrB).Skipped
	if skipped[SkipTracked] != 1 {
		t.Errorf("A skipped %v, want the one connection it tracks as %q", skipped, SkipTracked)
	}

}

// A node whose daemon restarts goes on forwarding meanwhile, and cannot send the connections it
// takes then: its peer asks the restarted node for the connections it saw a packet of since it
// was last heard, and not for those idle since before (copies it holds of connections that may
// have ended at the peer meanwhile).
func TestRestartedNodeGivesWhatItServed(t *testing.T) {
	nsA, nsB := netnstest.Joined(t, netnstest.End{Name: "sync-a", Addrs: []netip.Prefix{netip.PrefixFrom(addrA, 24)}},
		netnstest.End{Name: "sync-b", Addrs: []netip.Prefix{netip.PrefixFrom(addrB, 24)}})
	a := replicator(t, nsA, addrA, addrB)
	_, stopB := startReplicator(t, nsB, addrB, addrA)
	testutil.EventuallyClosed(t, "A's initial sync", a.InitialSyncDone())
	testutil.Eventually(t, "A hearing B", func() bool { return peerStatus(a, addrB).Connected })
	stopB()

	// A fresh namespace's established timeout is the kernel's 5 days: a connection with all of
	// it left saw a packet just now, one with 3,000 s left has been idle for days.
	const established = 5 * 24 * 3600
	served := tcpEntry(netip.MustParseAddrPort("198.51.100.7:2001"), netip.AddrPort{}, nl.TCP_CONNTRACK_ESTABLISHED, established)
	idle := tcpEntry(netip.MustParseAddrPort("198.51.100.7:2002"), netip.AddrPort{}, nl.TCP_CONNTRACK_ESTABLISHED, 3000)
	create(t, nsB, served, idle)
	replicator(t, nsB, addrB, addrA)

	testutil.Eventually(t, "A taking the connection B served while it could not send", func() bool {
		_, ok := entries(t, nsA)[served.Orig]
		return ok
	})
	testutil.Eventually(t, "A skipping the idle one", func() bool {
		return peerStatus(a, addrB).Skipped["idle since before the lapse"] == 1
	})
	if _, ok := entries(t, nsA)[idle.Orig]; ok {
		t.Errorf("A took in a connection idle on B since before its restart")
	}
}

// replicator runs a flowsync.Replicator of ns's conntrack table from addr to peer, stopped when
// the test ends.
func replicator(t *testing.T, ns netns.NsHandle, addr, peer netip.Addr) *flowsync.Replicator {
	t.Helper()
	r, stop := startReplicator(t, ns, addr, peer)
	t.Cleanup(stop)
	return r
}

// startReplicator runs a flowsync.Replicator of ns's conntrack table from addr to peer until stop
// is called.
func startReplicator(t *testing.T, ns netns.NsHandle, addr, peer netip.Addr) (r *flowsync.Replicator, stop func()) {
	t.Helper()
	var table *Table
	netnstest.In(t, ns, func() {
		var err error
		table, err = New([]netip.Addr{addr, peer})
		must(t, err)
		r, err = flowsync.New(flowsync.Options{
			Address: addr, Peers: []netip.Addr{peer}, Port: 3782, Secret: []byte("0123456789abcdef0123"),
			InitialSyncTimeout: time.Minute, NoRefresh: true, ResyncOnce: true,
		}, table, slog.New(slog.NewTextHandler(io.Discard, nil)))
		must(t, err)
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	return r, sync.OnceFunc(func() {
		cancel()
		must(t, <-done)
		table.Close()
	})
}

func peerStatus(r *flowsync.Replicator, addr netip.Addr) flowsync.PeerStatus {
	for _, p := range r.Status().Peers {
		if p.Address == addr {
			return p
		}
	}
	return flowsync.PeerStatus{}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
