package flowsync

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/testutil"
)

// testRefresh is the refresh interval of the tests.
const testRefresh = 20 * time.Millisecond

// A flow a node knows reaches its peer again in every refresh, with the idle time it has now:
// the peer's copy never keeps the idle time the first update or resync gave it.
func TestRefreshKeepsIdleFresh(t *testing.T) {
	port := testPort(t)
	flow := testFlows(1, false)[0]
	opts := Options{RefreshInterval: testRefresh}
	opts.Peers = peers("127.0.0.14")
	a := start(t, "127.0.0.13", port, opts, []datapath.ReplicatedFlow{flow})
	opts.Peers = peers("127.0.0.13")
	b := start(t, "127.0.0.14", port, opts, nil)

	// Packets of the flow come on a: its idle time there drops, and each refresh tells b.
	for hours := 3; hours >= 1; hours-- {
		flow.Idle = time.Duration(hours) * time.Hour
		a.dp.mu.Lock()
		a.dp.table = []datapath.ReplicatedFlow{flow}
		a.dp.mu.Unlock()
		testutil.Eventually(t, fmt.Sprintf("the flow at b idle %dh", hours), func() bool {
			got, ok := b.dp.lastImport(flow)
			return ok && got.Idle < flow.Idle+time.Hour
		})
	}
	// And it keeps coming, one refresh after another.
	seen, refreshes := b.dp.importedCount(), a.r.Status().Refreshes
	testutil.Eventually(t, "three more refreshes of the flow at b", func() bool {
		return b.dp.importedCount() >= seen+3 && a.r.Status().Refreshes >= refreshes+3
	})
	if r := peerStatus(a.r, "127.0.0.14").LastRefresh; r.Entries != 1 || r.At.IsZero() {
		t.Errorf("a's last refresh of b %+v, want 1 entry", r)
	}
	if r := peerStatus(b.r, "127.0.0.13").LastRefresh; r.Entries != 0 || r.At.IsZero() {
		t.Errorf("b's last refresh of a %+v, want its empty table", r)
	}
	for _, n := range []*node{a, b} {
		if s := n.r.Status(); len(s.Drops) != 0 || s.RefreshErrors != 0 {
			t.Errorf("status: %+v", s)
		}
	}
}

// A refresh due while the one before still walks the table (a large table, a slow pacer) is
// skipped and counted: two never run at once.
func TestRefreshSkippedNotOverlapped(t *testing.T) {
	port := testPort(t)
	release := make(chan struct{})
	table := testFlows(3, false)
	dp := &fakeDatapath{table: table, pause: func(ctx context.Context) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
	r := newStill(t, "127.0.0.15", port, "127.0.0.16", dp)
	run(t, r, dp)
	peer := fakePeer(t, "127.0.0.16", port, "127.0.0.15")

	testutil.Eventually(t, "a refresh in its walk", func() bool { walks, _, _ := dp.walkStats(); return walks > 0 })
	testutil.Eventually(t, "refreshes skipped meanwhile", func() bool { return r.Status().RefreshesSkipped >= 3 })
	if walks, walking, most := dp.walkStats(); walks != 1 || walking != 1 || most != 1 {
		t.Errorf("%d walks, %d running, at most %d at once: want the one refresh alone", walks, walking, most)
	}
	if s := r.Status(); s.Refreshes != 0 {
		t.Errorf("%d refreshes done while the first still runs", s.Refreshes)
	}
	close(release)
	testutil.Eventually(t, "refreshes done", func() bool { return r.Status().Refreshes >= 2 })
	if _, _, most := dp.walkStats(); most != 1 {
		t.Errorf("%d refreshes ran at once", most)
	}
	m := readRefresh(t, peer)
	if len(m.flows) != len(table) || !slices.EqualFunc(m.flows, table, sameFlow) {
		t.Errorf("refresh sent %+v, want %+v", m.flows, table)
	}
	if p := peerStatus(r, "127.0.0.16"); p.LastRefresh.Entries != uint64(len(table)) || p.SentEntries < uint64(len(table)) {
		t.Errorf("peer status %+v", p)
	}
}

// The refresh ends with Run: Run waits for the one running, and none starts after.
func TestRefreshStopsWithRun(t *testing.T) {
	port := testPort(t)
	dp := &fakeDatapath{table: testFlows(3, false), pause: func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	}}
	r := newStill(t, "127.0.0.17", port, "127.0.0.18", dp)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	fakePeer(t, "127.0.0.18", port, "127.0.0.17")
	testutil.Eventually(t, "a refresh in its walk", func() bool { walks, _, _ := dp.walkStats(); return walks > 0 })

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(testutil.Deadline):
		t.Fatal("Run did not return after its context ended")
	}
	walks, walking, _ := dp.walkStats()
	if walking != 0 {
		t.Errorf("Run returned with %d refreshes running", walking)
	}
	time.Sleep(10 * testRefresh)
	if again, _, _ := dp.walkStats(); again != walks {
		t.Errorf("%d refreshes began after Run returned", again-walks)
	}
	if s := r.Status(); s.Refreshes != 0 || s.RefreshErrors != 0 {
		t.Errorf("a refresh ended by Run counted: %+v", s)
	}
}

// A flow's idle time is aged by the time the walk of the table took, so that pacing never makes
// it look more recent on the peer than it is on the sender.
func TestRefreshAgesIdle(t *testing.T) {
	port := testPort(t)
	var held atomic.Int64
	table := testFlows(3, false)
	dp := &fakeDatapath{table: table, pause: func(context.Context) error {
		begun := time.Now()
		time.Sleep(testRefresh)
		held.CompareAndSwap(0, int64(time.Since(begun)))
		return nil
	}}
	r := newStill(t, "127.0.0.19", port, "127.0.0.20", dp)
	run(t, r, dp)
	m := readRefresh(t, fakePeer(t, "127.0.0.20", port, "127.0.0.19"))
	if len(m.flows) != len(table) {
		t.Fatalf("refresh of %d flows, want %d", len(m.flows), len(table))
	}
	// The wire carries milliseconds, truncated.
	if least := table[1].Idle + time.Duration(held.Load()) - time.Millisecond; m.flows[1].Idle < least {
		t.Errorf("flow after a pause of %s sent idle %s, want at least %s", time.Duration(held.Load()), m.flows[1].Idle, least)
	}
}

// newStill is a Replicator at addr of dp's flows with the peer at peerAddr, refreshing every
// testRefresh and with heartbeats so rare that the peer, once heard, stays connected.
func newStill(t *testing.T, addr string, port int, peerAddr string, dp *fakeDatapath) *Replicator {
	t.Helper()
	r, err := New(Options{Address: netip.MustParseAddr(addr), Port: port, Peers: peers(peerAddr), Secret: testSecret,
		Heartbeat: time.Hour, RefreshInterval: testRefresh}, dp, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// fakePeer is a socket at addr that the Replicator at to (already listening) takes for a
// connected peer: it sent it a heartbeat, as node 77.
func fakePeer(t *testing.T, addr string, port int, to string) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(addr), uint16(port))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	hb := seal(t, testSecret, msgHeartbeat, resyncRef{}, 77, 1, time.Now(), nil)
	if _, err := c.WriteToUDPAddrPort(hb, netip.AddrPortFrom(netip.MustParseAddr(to), uint16(port))); err != nil {
		t.Fatal(err)
	}
	return c
}

// readRefresh reads c's datagrams until the first refresh and returns it.
func readRefresh(t *testing.T, c *net.UDPConn) message {
	t.Helper()
	dec := newDecoder(testSecret)
	buf := make([]byte, maxDatagram)
	if err := c.SetReadDeadline(time.Now().Add(testutil.Deadline)); err != nil {
		t.Fatal(err)
	}
	for {
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("no refresh came: %v", err)
		}
		if m, reason := dec.open(buf[:n]); reason == "" && m.kind == msgRefresh {
			m.flows = slices.Clone(m.flows)
			return m
		}
	}
}
