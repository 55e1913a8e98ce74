package flowsync

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/testutil"
)

// fakeDatapath records what a Replicator imports and gives it a table to snapshot and flows to
// replicate (emit).
type fakeDatapath struct {
	mu       sync.Mutex
	table    []datapath.ReplicatedFlow
	imported []datapath.ReplicatedFlow
	emitFn   func([]datapath.ReplicatedFlow)
	// pause, if set, is called by SnapshotFlows after the first flow; an error ends the walk.
	pause func(ctx context.Context) error
	// walks counts the SnapshotFlows calls, walking those running, maxWalking the most at once.
	walks, walking, maxWalking int
	// horizons are the times ReplicatedUntil was told, in order.
	horizons []time.Time
}

func (d *fakeDatapath) WatchFlows(_ context.Context, emit func([]datapath.ReplicatedFlow)) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.emitFn = emit
	return nil
}

func (d *fakeDatapath) SnapshotFlows(ctx context.Context, fn func(datapath.ReplicatedFlow) bool) error {
	d.mu.Lock()
	table, pause := slices.Clone(d.table), d.pause
	d.walks++
	d.walking++
	d.maxWalking = max(d.maxWalking, d.walking)
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.walking--
		d.mu.Unlock()
	}()
	for i, f := range table {
		if i == 1 && pause != nil {
			if err := pause(ctx); err != nil {
				return err
			}
		}
		if !fn(f) {
			break
		}
	}
	return ctx.Err()
}

func (d *fakeDatapath) ImportFlows(_ context.Context, flows []datapath.ReplicatedFlow) (datapath.ImportResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.imported = append(d.imported, flows...)
	return datapath.ImportResult{Imported: len(flows), Skipped: map[string]int{"no such service": 0}}, nil
}

func (d *fakeDatapath) LostFlows(context.Context) (uint64, error) { return 0, nil }

func (d *fakeDatapath) ReplicatedUntil(_ context.Context, t time.Time) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.horizons = append(d.horizons, t)
	return nil
}

// horizon is the latest time ReplicatedUntil was told, zero if none.
func (d *fakeDatapath) horizon() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.horizons) == 0 {
		return time.Time{}
	}
	return d.horizons[len(d.horizons)-1]
}

// emit hands flows to the Replicator as the datapath would.
func (d *fakeDatapath) emit(flows []datapath.ReplicatedFlow) {
	d.mu.Lock()
	fn := d.emitFn
	d.mu.Unlock()
	fn(flows)
}

// setTable replaces the table the datapath snapshots.
func (d *fakeDatapath) setTable(table []datapath.ReplicatedFlow) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.table = table
}

// has tells whether every flow of want was imported (see sameFlow).
func (d *fakeDatapath) has(want []datapath.ReplicatedFlow) bool { return d.count(want) == len(want) }

// count is how many flows of want were imported (see sameFlow).
func (d *fakeDatapath) count(want []datapath.ReplicatedFlow) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, f := range want {
		if slices.ContainsFunc(d.imported, func(got datapath.ReplicatedFlow) bool { return sameFlow(got, f) }) {
			n++
		}
	}
	return n
}

// sameFlow tells whether got is want as a peer takes it in: its idle time aged on the way (by
// the time since the sender's walk of its table began), never younger.
func sameFlow(got, want datapath.ReplicatedFlow) bool {
	idle := got.Idle
	got.Idle = want.Idle
	return got == want && idle >= want.Idle
}

// lastImport is the latest import of want (see sameFlow), if any.
func (d *fakeDatapath) lastImport(want datapath.ReplicatedFlow) (datapath.ReplicatedFlow, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, got := range slices.Backward(d.imported) {
		if sameFlow(got, want) {
			return got, true
		}
	}
	return datapath.ReplicatedFlow{}, false
}

// walkStats are the SnapshotFlows calls so far, those running and the most that ran at once.
func (d *fakeDatapath) walkStats() (walks, walking, maxWalking int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.walks, d.walking, d.maxWalking
}

func (d *fakeDatapath) importedCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.imported)
}

// testPort is a UDP port free on the loopback addresses (the one the kernel gives 127.0.0.1).
func testPort(t *testing.T) int {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// node is a running Replicator and its datapath.
type node struct {
	r  *Replicator
	dp *fakeDatapath
}

// start runs a Replicator at addr with opts (Address, Port and Secret filled in) until the test
// ends.
func start(t *testing.T, addr string, port int, opts Options, table []datapath.ReplicatedFlow) *node {
	t.Helper()
	opts.Address = netip.MustParseAddr(addr)
	opts.Port = port
	if opts.Secret == nil {
		opts.Secret = testSecret
	}
	dp := &fakeDatapath{table: table}
	r, err := New(opts, dp, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	return run(t, r, dp)
}

// run runs r over dp until the test ends.
func run(t *testing.T, r *Replicator, dp *fakeDatapath) *node {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	testutil.Eventually(t, "the datapath watched", func() bool {
		dp.mu.Lock()
		defer dp.mu.Unlock()
		return dp.emitFn != nil
	})
	return &node{r: r, dp: dp}
}

func peers(addrs ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range addrs {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func peerStatus(r *Replicator, addr string) PeerStatus {
	for _, p := range r.Status().Peers {
		if p.Address == netip.MustParseAddr(addr) {
			return p
		}
	}
	return PeerStatus{}
}

func synced(r *Replicator) bool {
	select {
	case <-r.InitialSyncDone():
		return true
	default:
		return false
	}
}

// Two nodes: the one that joins gets the other's whole table in a full resync (several
// datagrams, paced), its initial sync is done with it, and then every new flow either creates;
// tunnel flows across families among them.
func TestExchangeAndResync(t *testing.T) {
	port := testPort(t)
	mixed := crossFamilyFlows() // among the others: they travel in datagrams of their own
	table := append(append(append(testFlows(1500, false), mixed[0]), testFlows(300, true)...), mixed[1])
	a := start(t, "127.0.0.2", port, Options{Peers: peers("127.0.0.3"), InitialSyncTimeout: time.Hour, ResyncRate: 1 << 20}, table)
	b := start(t, "127.0.0.3", port, Options{Peers: peers("127.0.0.2"), InitialSyncTimeout: time.Hour}, nil)

	testutil.Eventually(t, "b's initial sync", func() bool { return synced(b.r) })
	if !b.dp.has(table) {
		t.Fatalf("b imported %d flows, not a's %d", b.dp.importedCount(), len(table))
	}
	is := b.r.Status().InitialSync
	if !is.Done || is.WithoutPeer || is.Peer != netip.MustParseAddr("127.0.0.2") {
		t.Errorf("b's initial sync %+v, want done with 127.0.0.2", is)
	}
	if r := peerStatus(b.r, "127.0.0.2").LastResync; r.Entries != uint64(len(table)) || r.Total != uint64(len(table)) {
		t.Errorf("b's last resync from a %+v, want %d entries", r, len(table))
	}
	testutil.Eventually(t, "a's initial sync, from b's empty table", func() bool { return synced(a.r) })

	fromA, fromB := testFlows(302, true)[300:], testFlows(2000, false)[1990:] // not in the table
	moreMixed := mixed[0]
	moreMixed.Client = netip.MustParseAddrPort("[2001:db8:1::8]:40009")
	fromA = append(fromA[:1], moreMixed, fromA[1])
	a.dp.emit(fromA)
	b.dp.emit(fromB)
	testutil.Eventually(t, "a's new flows at b", func() bool { return b.dp.has(fromA) })
	testutil.Eventually(t, "b's new flows at a", func() bool { return a.dp.has(fromB) })

	pa := peerStatus(b.r, "127.0.0.2")
	if !pa.Connected || pa.NodeID != a.r.Status().NodeID || pa.ReceivedEntries < uint64(len(table)+len(fromA)) || pa.LastSeen.IsZero() {
		t.Errorf("b's status of a: %+v", pa)
	}
	testutil.Eventually(t, "a counting what it sent b", func() bool {
		return peerStatus(a.r, "127.0.0.3").LastServed.Entries == uint64(len(table)) &&
			peerStatus(a.r, "127.0.0.3").SentEntries >= uint64(len(table)+len(fromA))
	})
	for _, n := range []*node{a, b} {
		if s := n.r.Status(); len(s.Drops) != 0 || s.QueueDrops != 0 {
			t.Errorf("drops: %+v", s)
		}
	}
}

// A node that restarts (a new node id from the same address) is given a full resync again.
func TestRestartedPeerResyncs(t *testing.T) {
	port := testPort(t)
	table := testFlows(10, false)
	events := make(chan Event, 100)
	start(t, "127.0.0.4", port, Options{Peers: peers("127.0.0.5"), InitialSyncTimeout: time.Hour,
		Notify: func(ev Event) { events <- ev }}, table)
	first := &fakeDatapath{}
	for round := range 2 {
		opts := Options{Address: netip.MustParseAddr("127.0.0.5"), Port: port, Peers: peers("127.0.0.4"), Secret: testSecret, InitialSyncTimeout: time.Hour}
		dp := &fakeDatapath{}
		if round == 0 {
			dp = first
		}
		r, err := New(opts, dp, quietLog())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		testutil.Eventually(t, "the restarted node's resync", func() bool { return synced(r) && dp.has(table) })
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	ups := 0
	for len(events) > 0 {
		if ev := <-events; ev.Kind == EventPeerUp && ev.Peer == netip.MustParseAddr("127.0.0.5") {
			ups++
		}
	}
	if ups != 2 {
		t.Errorf("a saw its peer up %d times, want 2 (a start and a restart)", ups)
	}
}

func TestInitialSyncWithoutPeer(t *testing.T) {
	port := testPort(t)
	// Nobody at the peer's address: the timeout makes the initial sync done without it.
	n := start(t, "127.0.0.6", port, Options{Peers: peers("127.0.0.7"), InitialSyncTimeout: time.Millisecond}, nil)
	testutil.Eventually(t, "the initial sync timeout", func() bool { return synced(n.r) })
	if is := n.r.Status().InitialSync; !is.Done || !is.WithoutPeer || is.Peer.IsValid() {
		t.Errorf("initial sync %+v, want done without a peer", is)
	}
	if p := peerStatus(n.r, "127.0.0.7"); p.Connected || p.NodeID != 0 {
		t.Errorf("peer never heard: %+v", p)
	}
}

func TestInitialSyncNotWaited(t *testing.T) {
	n := start(t, "127.0.0.6", testPort(t), Options{Peers: peers("127.0.0.7")}, nil)
	if !synced(n.r) || !n.r.Status().InitialSync.WithoutPeer {
		t.Errorf("with a timeout of 0 the initial sync is done at once: %+v", n.r.Status().InitialSync)
	}
}

// Whatever is not a valid, fresh datagram of a peer is dropped, counted by reason and changes
// nothing in the datapath.
func TestDrops(t *testing.T) {
	port := testPort(t)
	n := start(t, "127.0.0.8", port, Options{Peers: peers("127.0.0.9"), InitialSyncTimeout: time.Hour}, nil)
	to := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 8), Port: port}
	sender := func(ip byte) *net.UDPConn {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, ip), Port: port})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	peer, stranger := sender(9), sender(10)
	flows := testFlows(2, false)
	valid := seal(t, testSecret, msgUpdates, resyncRef{}, 77, 1, time.Now(), flows[:1])
	if _, err := peer.WriteToUDP(valid, to); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the valid datagram imported", func() bool { return n.dp.has(flows[:1]) })

	// Each of these carries flows[1], which must never be imported.
	forged := seal(t, testSecret, msgUpdates, resyncRef{}, 77, 2, time.Now(), flows[1:])
	forged[headerSize+9] ^= 1
	otherVersion := seal(t, testSecret, msgUpdates, resyncRef{}, 77, 3, time.Now(), flows[1:])
	otherVersion[4] = 2
	enc := newEncoder(DefaultMTU)
	enc.reset(msgUpdates, resyncRef{})
	enc.count = 1 // a record counted and missing
	undecodable := enc.seal(newMAC(testSecret), 77, 4, time.Now())
	for _, c := range []struct {
		from   *net.UDPConn
		b      []byte
		reason DropReason
	}{
		{peer, valid, DropReplay},
		{peer, seal(t, testSecret, msgUpdates, resyncRef{}, 77, 5, time.Now().Add(-time.Hour), flows[1:]), DropReplay},
		{peer, forged, DropBadMAC},
		{peer, seal(t, []byte("not the secret of this link"), msgUpdates, resyncRef{}, 77, 6, time.Now(), flows[1:]), DropBadMAC},
		{stranger, seal(t, testSecret, msgUpdates, resyncRef{}, 78, 1, time.Now(), flows[1:]), DropUnknownPeer},
		{peer, seal(t, testSecret, msgUpdates, resyncRef{}, 77, 7, time.Now(), flows[1:])[:minDatagram-1], DropBadLength},
		{peer, []byte("GET / HTTP/1.1\r\nHost: sluice\r\n\r\n................................................."), DropBadMagic},
		{peer, otherVersion, DropBadVersion},
		{peer, undecodable, DropDecodeError},
		{peer, seal(t, testSecret, msgUpdates, resyncRef{}, n.r.Status().NodeID, 1, time.Now(), flows[1:]), DropFromSelf},
	} {
		before := n.r.Status().Drops[c.reason]
		if _, err := c.from.WriteToUDP(c.b, to); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, "a drop for "+string(c.reason), func() bool { return n.r.Status().Drops[c.reason] == before+1 })
	}
	s := n.r.Status()
	p := peerStatus(n.r, "127.0.0.9")
	if got := n.dp.importedCount(); got != 1 {
		t.Errorf("%d flows imported, want the valid one only", got)
	}
	if p.Drops[DropReplay] != 2 || p.Drops[DropBadMAC] != 2 || p.Drops[DropUnknownPeer] != 0 || s.Drops[DropUnknownPeer] != 1 {
		t.Errorf("drops %v, of the peer %v", s.Drops, p.Drops)
	}
	if p.NodeID != 77 || p.ReceivedEntries != 1 {
		t.Errorf("peer status %+v", p)
	}
}

// A flood of new flows fills the queue: what does not fit is dropped and counted, and the
// datapath's emit never waits.
func TestFloodDropsAndCounts(t *testing.T) {
	n := start(t, "127.0.0.11", testPort(t), Options{Peers: peers("127.0.0.12"), QueueLimit: 100}, nil)
	flood := testFlows(5000, false)
	for i := 0; i < len(flood); i += 1000 {
		n.dp.emit(flood[i : i+1000])
	}
	s := n.r.Status()
	if s.QueueDrops < uint64(len(flood)-5*s.QueueLimit) || s.QueueLength > s.QueueLimit {
		t.Errorf("queue %d of %d, %d drops of %d flows", s.QueueLength, s.QueueLimit, s.QueueDrops, len(flood))
	}
	testutil.Eventually(t, "the queue sent", func() bool {
		p := peerStatus(n.r, "127.0.0.12")
		return n.r.Status().QueueLength == 0 && p.SentEntries+n.r.Status().QueueDrops == uint64(len(flood))
	})
}

func TestOptionsRefused(t *testing.T) {
	good := Options{Peers: peers("10.0.0.2"), Address: netip.MustParseAddr("10.0.0.1"), Secret: testSecret}
	for want, change := range map[string]func(o *Options){
		"flowsync: secret: 8 bytes, at least 16 needed":           func(o *Options) { o.Secret = []byte("12345678") },
		"flowsync: peers: neither peers nor a group":              func(o *Options) { o.Peers = nil },
		"flowsync: group: both peers and a group":                 func(o *Options) { o.Group = netip.MustParseAddr("239.1.1.1") },
		"flowsync: peers[0]: 10.0.0.1 is this node's own address": func(o *Options) { o.Peers = peers("10.0.0.1") },
		"flowsync: peers[1]: 2001:db8::1 is not of the family of peers[0]": func(o *Options) {
			o.Peers = peers("10.0.0.2", "2001:db8::1")
		},
		"flowsync: mtu: 100 is not between 160 and 65507": func(o *Options) { o.MTU = 100 },
		"flowsync: refresh_interval: 11m0s is not between 0 (the default, 1m0s) and 10m0s": func(o *Options) {
			o.RefreshInterval = 11 * time.Minute
		},
		"flowsync: refresh_interval: -1s is not between 0 (the default, 1m0s) and 10m0s": func(o *Options) {
			o.RefreshInterval = -time.Second
		},
		"flowsync: interface: a group needs the interface to join it on": func(o *Options) {
			o.Peers, o.Group = nil, netip.MustParseAddr("239.1.1.1")
		},
		"flowsync: group: 10.1.1.1 is not a multicast address": func(o *Options) {
			o.Peers, o.Group, o.Interface = nil, netip.MustParseAddr("10.1.1.1"), "eth1"
		},
	} {
		o := good
		change(&o)
		if _, err := New(o, &fakeDatapath{}, quietLog()); err == nil || err.Error() != want {
			t.Errorf("got %v, want %q", err, want)
		}
	}
}

// With ResyncOnce a node asks each peer for a full resync once, the first time it hears it: a,
// whose initial sync ended without a peer, asks b when b comes up later; when b restarts (a new
// node id), b asks a again, and a asks b once for the flows it saw a packet of since a last heard
// it, skipping the others. NoRefresh sends no refresh.
func TestResyncOnce(t *testing.T) {
	port := testPort(t)
	opts := Options{InitialSyncTimeout: time.Millisecond, ResyncOnce: true, NoRefresh: true,
		RefreshInterval: 10 * time.Millisecond, Heartbeat: 20 * time.Millisecond}
	opts.Peers = peers("127.0.0.9")
	flows := testFlows(30, false)
	aTable, bTable, restartedTable := flows[:10], flows[10:20], flows[20:]
	// The restarted b served half of its table while it could not send (a packet in the last
	// millisecond); the other half are flows (or copies of a's) idle since long before.
	served, before := restartedTable[:5], restartedTable[5:]
	for i := range served {
		served[i].Idle = 0
		before[i].Idle = time.Hour
	}
	a := start(t, "127.0.0.8", port, opts, aTable)
	testutil.Eventually(t, "a's initial sync without a peer", func() bool { return synced(a.r) })

	bOpts := opts
	bOpts.Address, bOpts.Port, bOpts.Secret = netip.MustParseAddr("127.0.0.9"), port, testSecret
	bOpts.Peers, bOpts.InitialSyncTimeout = peers("127.0.0.8"), time.Hour
	b := &fakeDatapath{table: bTable}
	r, err := New(bOpts, b, quietLog())
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	testutil.Eventually(t, "b's initial sync from a", func() bool { return synced(r) && b.has(aTable) })
	testutil.Eventually(t, "a asking b, heard for the first time", func() bool { return a.dp.has(bTable) })
	cancel()
	must(t, <-done)

	restarted := start(t, "127.0.0.9", port, bOpts, restartedTable)
	testutil.Eventually(t, "the restarted b's initial sync from a", func() bool { return synced(restarted.r) && restarted.dp.has(aTable) })
	testutil.Eventually(t, "a taking the flows the restarted b served since it was last heard", func() bool {
		return a.dp.has(served) && peerStatus(a.r, "127.0.0.9").Skipped[skipBeforeLapse] == uint64(len(before))
	})
	if got := a.dp.count(before); got != 0 {
		t.Errorf("a took %d flows the restarted b saw no packet of since before its restart", got)
	}
	time.Sleep(20 * opts.Heartbeat) // time for a request a should not make again, and its answer
	if n := peerStatus(a.r, "127.0.0.9").Skipped[skipBeforeLapse]; n != uint64(len(before)) {
		t.Errorf("a asked the restarted b more than once: %d skipped, want %d", n, len(before))
	}
	for _, n := range []*node{a, restarted} {
		if s := n.r.Status(); s.Refreshes != 0 || s.Rejoin.Pending {
			t.Errorf("status %+v: want no refresh, no rejoin", s)
		}
	}
}
