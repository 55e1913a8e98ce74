package flowsync

import (
	"net/netip"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/netnstest"
	"github.com/sluicelb/sluice/internal/testutil"
)

// Two nodes in namespaces of their own, joined by a veth, replicate over a multicast group: they
// find each other by their heartbeats, the one that joins gets a full resync, and updates reach
// it through the group.
func TestGroup(t *testing.T) {
	nsA, nsB := netnstest.Joined(t, netnstest.End{Name: "sync-a", Addrs: []netip.Prefix{netip.MustParsePrefix("10.77.0.1/24")}},
		netnstest.End{Name: "sync-b", Addrs: []netip.Prefix{netip.MustParsePrefix("10.77.0.2/24")}})

	table := testFlows(500, false)
	group := netip.MustParseAddr("239.77.0.1")
	var a, b *node
	netnstest.In(t, nsA, func() {
		dp := &fakeDatapath{table: table}
		r, err := New(Options{Interface: "sync-a", Group: group, Secret: testSecret, InitialSyncTimeout: time.Hour}, dp, quietLog())
		must(t, err)
		a = run(t, r, dp)
	})
	netnstest.In(t, nsB, func() {
		dp := &fakeDatapath{}
		r, err := New(Options{Interface: "sync-b", Group: group, Secret: testSecret, InitialSyncTimeout: time.Hour}, dp, quietLog())
		must(t, err)
		b = run(t, r, dp)
	})
	testutil.Eventually(t, "b's initial sync from a", func() bool { return synced(b.r) && b.dp.has(table) })
	if is := b.r.Status().InitialSync; is.WithoutPeer || is.Peer != netip.MustParseAddr("10.77.0.1") {
		t.Errorf("b's initial sync %+v, want from 10.77.0.1", is)
	}
	update := testFlows(600, false)[550:]
	a.dp.emit(update)
	testutil.Eventually(t, "a's update at b through the group", func() bool { return b.dp.has(update) })
	pb := peerStatus(a.r, "10.77.0.2")
	if !pb.Connected || pb.SentEntries < uint64(len(table)+len(update)) {
		t.Errorf("a's status of b: %+v", pb)
	}
	for _, n := range []*node{a, b} {
		if s := n.r.Status(); len(s.Drops) != 0 || len(s.Peers) != 1 {
			t.Errorf("status: %+v", s)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A peer without a route to it counts send errors and blocks nothing: updates are taken from
// the datapath, and the status answers.
func TestUnreachablePeer(t *testing.T) {
	var n *node
	netnstest.In(t, netnstest.New(t), func() {
		netnstest.Up(t, netnstest.End{Name: "lo"})
		dp := &fakeDatapath{}
		r, err := New(Options{Address: netip.MustParseAddr("127.0.0.1"), Peers: peers("10.99.0.1"), Secret: testSecret}, dp, quietLog())
		must(t, err)
		n = run(t, r, dp)
	})
	flows := testFlows(3000, false)
	n.dp.emit(flows)
	testutil.Eventually(t, "the updates taken and the send errors counted", func() bool {
		s := n.r.Status()
		return s.QueueLength == 0 && s.SendErrors > 1 && peerStatus(n.r, "10.99.0.1").SendErrors == s.SendErrors
	})
	if s := n.r.Status(); s.QueueDrops != 0 || peerStatus(n.r, "10.99.0.1").SentEntries != 0 {
		t.Errorf("status %+v", s)
	}
}
