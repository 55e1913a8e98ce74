package flowsync

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/sluicelb/sluice/internal/datapath"
)

// receive reads and handles datagrams until the socket is closed, into one buffer.
func (r *Replicator) receive(ctx context.Context) {
	dec := newDecoder(r.opts.Secret)
	buf := make([]byte, maxDatagram+1)
	for {
		n, from, err := r.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				return
			}
			r.warn.warn("read", "sync: read failed", "error", err)
			continue
		}
		r.handle(ctx, dec, buf[:n], from.Addr().Unmap(), time.Now())
	}
}

// handle checks one datagram from addr and acts on it, or drops it.
func (r *Replicator) handle(ctx context.Context, dec *decoder, b []byte, from netip.Addr, now time.Time) {
	m, reason := dec.open(b)
	if reason != "" {
		r.dropped(from, reason, "")
		return
	}
	p, up, back, reason, detail := r.admit(from, &m, now)
	if reason != "" {
		r.dropped(from, reason, detail)
		return
	}
	if up {
		r.notify(Event{Kind: EventPeerUp, Peer: from, Message: fmt.Sprintf("peer %s up (node %016x)", from, m.node)})
		r.notify(back...)
		if r.wantsResync(p) {
			r.askResync(p)
		}
	}
	switch m.kind {
	case msgUpdates, msgRefresh:
		r.importFlows(ctx, p, m.flows)
	case msgResyncData:
		r.importFlows(ctx, p, r.progress(p, m.ref, m.flows, now))
	case msgResyncEnd:
		r.resyncEnded(p, &m, now)
	case msgResyncRequest:
		r.serve(ctx, p, resyncRef{m.node, m.seq})
	case msgHeartbeat:
	}
}

// wantsResync tells whether peer p, which comes up, is asked for a full resync: always, or with
// Options.ResyncOnce if it never was, or for what it served since a time (see peer.askSince).
func (r *Replicator) wantsResync(p *peer) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.opts.ResyncOnce || !p.everAsked || !p.askSince.IsZero()
}

// dropped counts and logs a datagram from addr dropped for reason.
func (r *Replicator) dropped(from netip.Addr, reason DropReason, detail string) {
	r.mu.Lock()
	r.drops[reason]++
	if p := r.peers[from]; p != nil {
		p.status.Drops[reason]++
	}
	r.mu.Unlock()
	args := []any{"reason", reason, "from", from}
	if detail != "" {
		args = append(args, "detail", detail)
	}
	r.warn.warn("drop "+string(reason), "sync: dropped a datagram", args...)
}

// admit checks an authenticated datagram's sender (a peer, not this node) and freshness (its
// clock and sequence number), and records it; up tells that the peer came up (first heard,
// heard again after being down, or a new node id).
func (r *Replicator) admit(from netip.Addr, m *message, now time.Time) (p *peer, up bool, back []Event, reason DropReason, detail string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p = r.peers[from]
	switch {
	case p == nil && (!r.opts.Group.IsValid() || len(r.peers) >= maxGroupPeers):
		return nil, false, nil, DropUnknownPeer, ""
	case m.node == r.node.Load():
		return nil, false, nil, DropFromSelf, ""
	}
	if skew := now.Sub(time.Unix(0, m.time)); skew > r.opts.MaxSkew || skew < -r.opts.MaxSkew {
		return nil, false, nil, DropReplay, fmt.Sprintf("its clock is %s from this node's (at most %s): a replay, or clocks not in sync",
			skew.Round(time.Millisecond), r.opts.MaxSkew)
	}
	if p == nil {
		p = newPeer(from)
		r.peers[from] = p
	}
	known := p.win.node != 0
	newNode, ok := p.admit(m)
	if !ok {
		return nil, false, nil, DropReplay, fmt.Sprintf("node %016x sequence number %d seen or too old", m.node, m.seq)
	}
	up = newNode || !p.connected
	if up {
		p.asked = nil // a fresh resync, with fresh attempts
		p.whole = false
		back = r.noteBack(p, now)
	}
	if newNode && known && r.opts.ResyncOnce && p.askSince.IsZero() {
		p.askSince = p.lastSeen
	}
	p.connected, p.lastSeen = true, now
	p.status.ReceivedEntries += uint64(len(m.flows))
	if m.kind == msgUpdates || m.kind == msgHeartbeat {
		p.status.Lag = now.Sub(time.Unix(0, m.time))
	}
	return p, up, back, "", ""
}

// importFlows writes a peer's flows into the datapath.
func (r *Replicator) importFlows(ctx context.Context, p *peer, flows []datapath.ReplicatedFlow) {
	if len(flows) == 0 {
		return
	}
	res, err := r.dp.ImportFlows(ctx, flows)
	r.mu.Lock()
	if err != nil {
		p.status.ImportErrors++
	}
	for reason, n := range res.Skipped {
		p.status.Skipped[reason] += uint64(n)
	}
	r.mu.Unlock()
	if err != nil && ctx.Err() == nil {
		r.warn.warn("import "+p.addr.String(), "sync: import failed", "from", p.addr, "error", err)
	}
}

// progress counts the records of the resync ref, if it is the one asked of p, and returns those
// to take in: all of them, or, of a resync asked since a time (peer.askSince), those the peer saw
// a packet of since (the others are counted skipped, skipBeforeLapse).
func (r *Replicator) progress(p *peer, ref resyncRef, flows []datapath.ReplicatedFlow, now time.Time) []datapath.ReplicatedFlow {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := p.asked
	if a == nil || a.ref != ref {
		return flows
	}
	a.received += uint64(len(flows))
	a.progress = now
	if a.maxIdle == 0 {
		return flows
	}
	recent := flows[:0:0]
	for _, f := range flows {
		if f.Idle <= a.maxIdle {
			recent = append(recent, f)
		}
	}
	if n := len(flows) - len(recent); n > 0 {
		p.status.Skipped[skipBeforeLapse] += uint64(n)
	}
	a.recent += uint64(len(recent))
	return recent
}

// resyncEnded completes the resync asked of p that m ends, or asks it again when records were
// lost on the way.
func (r *Replicator) resyncEnded(p *peer, m *message, now time.Time) {
	r.mu.Lock()
	a := p.asked
	if a == nil || a.ref != m.ref {
		r.mu.Unlock()
		return
	}
	complete := a.received >= m.total || a.attempts >= maxResyncAttempts
	res := Resync{At: now, Entries: a.received, Total: m.total, Duration: now.Sub(a.started)}
	p.status.LastResync = res
	msg := fmt.Sprintf("full resync from %s: %d of %d entries in %s", p.addr, res.Entries, res.Total, res.Duration.Round(time.Millisecond))
	if a.maxIdle > 0 {
		msg = fmt.Sprintf("resync from %s after a lapse: %d of %d entries in %s, %d seen in the last %s taken in",
			p.addr, res.Entries, res.Total, res.Duration.Round(time.Millisecond), a.recent, a.maxIdle.Round(time.Millisecond))
	}
	evs := []Event{{Kind: EventResync, Peer: p.addr, Message: msg}}
	if complete {
		p.asked = nil
		p.whole = a.received >= m.total && a.maxIdle == 0
		p.askSince = time.Time{}
		if !r.initial.Done && a.maxIdle == 0 {
			r.initial = InitialSync{Done: true, Peer: p.addr, At: now}
			close(r.synced)
			evs = append(evs, Event{Kind: EventInitialSync, Peer: p.addr, Message: fmt.Sprintf("initial sync done: from %s", p.addr)})
		}
		evs = append(evs, r.rejoined(p.addr, now)...)
	}
	r.mu.Unlock()
	r.notify(evs...)
	if !complete {
		r.askResync(p)
	}
}

// serve sends p the full resync it asked for (ref), in a goroutine of its own; one it asked
// before is canceled.
func (r *Replicator) serve(ctx context.Context, p *peer, ref resyncRef) {
	r.mu.Lock()
	if p.serving != nil {
		p.serving()
	}
	sctx, cancel := context.WithCancel(ctx)
	p.serial++
	serial := p.serial
	p.serving = cancel
	r.mu.Unlock()
	r.servers.Go(func() {
		defer cancel()
		res, err := r.sendResync(sctx, p.addr, ref)
		r.mu.Lock()
		if p.serial == serial {
			p.serving = nil
		}
		if err == nil {
			p.status.LastServed = res
		}
		r.mu.Unlock()
		if err != nil && sctx.Err() == nil {
			r.warn.warn("resync "+p.addr.String(), "sync: full resync for a peer failed", "to", p.addr, "error", err)
		}
	})
}

// sendResync sends to addr every active flow of the datapath, paced, then the resync-end.
func (r *Replicator) sendResync(ctx context.Context, addr netip.Addr, ref resyncRef) (Resync, error) {
	start := time.Now()
	to := []netip.AddrPort{r.dest(addr)}
	total, err := r.sendTable(ctx, msgResyncData, ref, to)
	if err != nil {
		return Resync{}, err
	}
	enc := newEncoder(minMTU)
	enc.reset(msgResyncEnd, ref)
	enc.setTotal(total)
	r.send(enc, to, nil)
	now := time.Now()
	return Resync{At: now, Entries: total, Total: total, Duration: now.Sub(start)}, nil
}
