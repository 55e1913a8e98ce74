package flowsync

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicelb/sluice/internal/datapath"
)

// Replicator replicates a datapath's flows to the other balancer nodes and takes theirs in.
type Replicator struct {
	opts    Options
	dp      datapath.FlowReplicator
	log     *slog.Logger
	warn    *limitedLog
	conn    *net.UDPConn
	node    atomic.Uint64    // this node's id: random at New, a new one at each Resume
	targets []netip.AddrPort // where updates and heartbeats go: the peers, or the group
	queue   *queue
	pacer   *pacer
	synced  chan struct{}

	// sendMu orders the datagrams: their sequence numbers leave in order. It is taken before mu.
	sendMu sync.Mutex
	seq    uint64
	mac    hash.Hash

	mu          sync.Mutex
	peers       map[netip.Addr]*peer
	drops       map[DropReason]uint64
	sendErrors  uint64
	initial     InitialSync
	unencodable atomic.Uint64
	// refreshes, refreshesSkipped and refreshErrors count the refreshes sent, skipped and failed.
	refreshes, refreshesSkipped, refreshErrors uint64
	// alone is a time cut off from every peer, and the rejoin that follows it (rejoin.go).
	alone isolation
	// told is the latest horizon the datapath was told of (horizon.go).
	told time.Time
	// pausedSince is when the table stopped taking in its peers' changes (Pause); zero: it
	// takes them.
	pausedSince time.Time

	running   atomic.Bool
	closeOnce sync.Once
	servers   sync.WaitGroup
}

// New opens the sync socket in the calling thread's network namespace and returns a Replicator
// of dp's flows; Run starts it.
func New(opts Options, dp datapath.FlowReplicator, log *slog.Logger) (*Replicator, error) {
	o, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	o.Secret = slices.Clone(o.Secret)
	id, err := newNodeID(0)
	if err != nil {
		return nil, err
	}
	conn, err := listen(&o)
	if err != nil {
		return nil, err
	}
	r := &Replicator{
		opts: o, dp: dp, log: log, warn: newLimitedLog(log), conn: conn,
		queue:  newQueue(o.QueueLimit),
		pacer:  newPacer(o.ResyncRate),
		synced: make(chan struct{}),
		mac:    newMAC(o.Secret),
		peers:  map[netip.Addr]*peer{},
		drops:  map[DropReason]uint64{},
	}
	for _, p := range o.Peers {
		r.peers[p] = newPeer(p)
		r.targets = append(r.targets, r.dest(p))
	}
	if o.Group.IsValid() {
		r.targets = []netip.AddrPort{r.dest(o.Group)}
	}
	r.node.Store(id)
	return r, nil
}

// newNodeID draws a node id at random: not 0, and not old.
func newNodeID(old uint64) (uint64, error) {
	var b [8]byte
	for id := uint64(0); ; {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, fmt.Errorf("flowsync: node id: %w", err)
		}
		if id = binary.BigEndian.Uint64(b[:]); id != 0 && id != old {
			return id, nil
		}
	}
}

// Run replicates until ctx ends, then closes the socket; it runs once.
func (r *Replicator) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("flowsync: Run called twice")
	}
	defer r.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if r.opts.InitialSyncTimeout == 0 {
		r.goWithout()
	}
	if err := r.dp.WatchFlows(ctx, r.countServed); err != nil {
		return fmt.Errorf("flowsync: watch flows: %w", err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { r.receive(ctx) })
	wg.Go(func() { r.sendUpdates(ctx) })
	wg.Go(func() { r.tick(ctx) })
	wg.Go(func() { r.refreshLoop(ctx) })
	wg.Go(func() { r.advanceHorizon(ctx) })
	<-ctx.Done()
	r.Close() // ends receive
	wg.Wait()
	r.servers.Wait()
	return nil
}

// Close closes the socket of a Replicator that Run did not take (Run closes it when it ends).
func (r *Replicator) Close() error {
	var err error
	r.closeOnce.Do(func() { err = r.conn.Close() })
	return err
}

// InitialSyncDone is closed once the initial sync is done: a peer's full resync completed, or
// Options.InitialSyncTimeout passed (Status().InitialSync tells which).
func (r *Replicator) InitialSyncDone() <-chan struct{} { return r.synced }

// Status tells what the Replicator did, peers sorted by address.
func (r *Replicator) Status() Status {
	q := r.queue.status(time.Now())
	r.mu.Lock()
	defer r.mu.Unlock()
	s := Status{
		NodeID: r.node.Load(), InitialSync: r.initial, PausedSince: r.pausedSince, Rejoin: r.alone.rejoin,
		QueueLength: q.length, QueueLimit: r.opts.QueueLimit, QueueDrops: q.drops, OldestQueued: q.oldest,
		Unencodable: r.unencodable.Load(), SendErrors: r.sendErrors, Drops: maps.Clone(r.drops),
		Refreshes: r.refreshes, RefreshesSkipped: r.refreshesSkipped, RefreshErrors: r.refreshErrors,
		ReplicatedUntil: r.told,
	}
	for _, p := range r.peers {
		s.Peers = append(s.Peers, p.snapshot())
	}
	slices.SortFunc(s.Peers, func(a, b PeerStatus) int { return a.Address.Compare(b.Address) })
	return s
}

// dest is addr at the sync port.
func (r *Replicator) dest(addr netip.Addr) netip.AddrPort {
	return netip.AddrPortFrom(addr, uint16(r.opts.Port))
}

// notify tells Options.Notify of evs and logs them.
func (r *Replicator) notify(evs ...Event) {
	for _, ev := range evs {
		r.log.Info("sync: "+ev.Message, "event", ev.Kind, "peer", ev.Peer)
		if r.opts.Notify != nil {
			r.opts.Notify(ev)
		}
	}
}

// send seals enc's datagram and sends it to each of to; before, if set, is told the datagram's
// sequence number before it leaves.
func (r *Replicator) send(enc *encoder, to []netip.AddrPort, before func(seq uint64)) {
	r.sendMu.Lock()
	defer r.sendMu.Unlock()
	r.seq++
	b := enc.seal(r.mac, r.node.Load(), r.seq, time.Now())
	if before != nil {
		before(r.seq)
	}
	for _, dst := range to {
		_, err := r.conn.WriteToUDPAddrPort(b, dst)
		r.sent(dst.Addr(), uint64(enc.count), err)
	}
}

// sent counts n records sent to addr (a peer, or the group: each peer), or err.
func (r *Replicator) sent(addr netip.Addr, n uint64, err error) {
	r.mu.Lock()
	if err != nil {
		r.sendErrors++
	}
	for _, p := range r.peers {
		if addr != r.opts.Group && addr != p.addr {
			continue
		}
		if err != nil {
			p.status.SendErrors++
		} else {
			p.status.SentEntries += n
		}
	}
	r.mu.Unlock()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		r.warn.warn("send "+addr.String(), "sync: send failed", "to", addr, "error", err)
	}
}

// sendUpdates sends the queued flows until ctx ends.
func (r *Replicator) sendUpdates(ctx context.Context) {
	enc := newEncoder(r.opts.MTU)
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.queue.ready:
		}
		batch := r.queue.take()
		enc.reset(msgUpdates, resyncRef{})
		for i := range batch {
			_ = r.pack(enc, &batch[i], func() error { r.send(enc, r.targets, nil); return nil })
		}
		if !enc.empty() {
			r.send(enc, r.targets, nil)
		}
		r.queue.recycle(batch)
	}
}

// pack adds f to enc, first calling flush (which sends the datagram) and starting a new
// datagram of the same kind when it is full; a flow the format cannot carry is counted. It
// returns flush's error.
func (r *Replicator) pack(enc *encoder, f *datapath.ReplicatedFlow, flush func() error) error {
	ok, err := enc.add(f)
	if err != nil {
		r.unencodable.Add(1)
		return nil
	}
	if ok {
		return nil
	}
	if err := flush(); err != nil {
		return err
	}
	enc.reset(enc.kind, enc.ref)
	_, _ = enc.add(f) // it fits in an empty datagram: minMTU holds the largest record
	return nil
}

// heartbeat sends a heartbeat to the peers or the group, unless the Replicator is paused.
func (r *Replicator) heartbeat(enc *encoder) {
	if r.paused() {
		return
	}
	enc.reset(msgHeartbeat, resyncRef{})
	r.send(enc, r.targets, nil)
}

// tick sends the heartbeats and checks the peers and the initial sync timeout until ctx ends.
func (r *Replicator) tick(ctx context.Context) {
	enc := newEncoder(minMTU)
	r.heartbeat(enc)
	t := time.NewTicker(r.opts.Heartbeat)
	defer t.Stop()
	var timeout <-chan time.Time
	if r.opts.InitialSyncTimeout > 0 {
		tt := time.NewTimer(r.opts.InitialSyncTimeout)
		defer tt.Stop()
		timeout = tt.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-timeout:
			r.goWithout()
		case <-t.C:
			r.heartbeat(enc)
			r.check(time.Now())
		}
	}
}

// goWithout makes the initial sync done without a peer's resync, if it is not done yet.
func (r *Replicator) goWithout() {
	r.mu.Lock()
	if r.initial.Done {
		r.mu.Unlock()
		return
	}
	r.initial = InitialSync{Done: true, WithoutPeer: true, At: time.Now()}
	close(r.synced)
	r.mu.Unlock()
	r.notify(Event{Kind: EventInitialSync, Message: fmt.Sprintf(
		"initial sync done without a peer: none completed a full resync within %s", r.opts.InitialSyncTimeout)})
}

// check marks down the peers not heard for missedHeartbeats intervals and asks again the
// resyncs that stalled as long.
func (r *Replicator) check(now time.Time) {
	late := missedHeartbeats * r.opts.Heartbeat
	var evs []Event
	var again []*peer
	r.mu.Lock()
	evs = append(evs, r.rejoinExpired(now)...)
	for _, p := range r.peers {
		if p.connected && now.Sub(p.lastSeen) >= late {
			p.connected = false
			evs = append(evs, Event{Kind: EventPeerDown, Peer: p.addr, Message: fmt.Sprintf(
				"peer %s down: nothing from it for %s", p.addr, now.Sub(p.lastSeen).Round(time.Millisecond))})
		}
		if a := p.asked; a != nil && p.connected && now.Sub(a.progress) >= late {
			if a.attempts < maxResyncAttempts {
				again = append(again, p)
			} else {
				p.asked = nil
				evs = append(evs, Event{Kind: EventResync, Peer: p.addr, Message: fmt.Sprintf(
					"full resync from %s stalled %d times: given up until it comes up again", p.addr, a.attempts)})
			}
		}
	}
	r.noteAlone(now)
	r.mu.Unlock()
	r.notify(evs...)
	for _, p := range again {
		r.askResync(p)
	}
}

// askResync asks p for a full resync: again, if one asked of it stalled or lost records.
func (r *Replicator) askResync(p *peer) {
	enc := newEncoder(minMTU)
	enc.reset(msgResyncRequest, resyncRef{})
	r.send(enc, []netip.AddrPort{r.dest(p.addr)}, func(seq uint64) {
		now := time.Now()
		r.mu.Lock()
		attempts := 1
		if p.asked != nil {
			attempts = p.asked.attempts + 1
		}
		p.asked = &request{ref: resyncRef{r.node.Load(), seq}, started: now, progress: now, attempts: attempts}
		if !p.askSince.IsZero() && r.initial.Done {
			// The flows it saw a packet of since then, give or take a heartbeat (a peer may
			// have stopped sending its changes a little before its last datagram) and a
			// second (the kernel's conntrack tells the time a flow has left in seconds).
			// A node without its initial sync asks for the whole table.
			p.asked.maxIdle = now.Sub(p.askSince) + r.opts.Heartbeat + time.Second
		}
		p.everAsked = true
		r.mu.Unlock()
	})
}
