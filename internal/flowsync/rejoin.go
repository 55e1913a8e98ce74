package flowsync

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/sluicelb/sluice/internal/datapath"
)

// Rejoin: a node that was cut off from every peer (its links down, a partition) while its daemon
// kept running has its initial sync long done, yet it lacks every flow its peers made meanwhile.
// If it served no new flow of its own while cut off, it was not the one serving: when a peer
// comes back it waits, like a node that starts, for a full resync from a peer (or
// InitialSyncTimeout) before it takes traffic again (Rejoining). A node that served new flows
// while alone was serving: it goes on serving, so that the node that was serving never steps
// back for the one that returns. The time a peer needs to be seen down is missedHeartbeats
// heartbeats, as for EventPeerDown.

// EventRejoin: a node cut off from every peer got one back and waits for (or got) a resync.
const EventRejoin EventKind = "sync_rejoin"

// Rejoin is a pending rejoin: since when and through which peer.
type Rejoin struct {
	Pending bool
	Peer    netip.Addr
	Since   time.Time
}

// isolation is what the Replicator knows of a time cut off from every peer.
type isolation struct {
	since  time.Time // zero: not cut off
	served uint64    // new flows of this node's own while cut off
	rejoin Rejoin
}

// countServed is the datapath's emit callback: it counts the new flows of this node's own while
// it is cut off, then queues them.
func (r *Replicator) countServed(flows []datapath.ReplicatedFlow) {
	n := uint64(0)
	for i := range flows {
		if !flows[i].Closing {
			n++
		}
	}
	r.mu.Lock()
	if !r.alone.since.IsZero() {
		r.alone.served += n
	}
	r.mu.Unlock()
	r.queue.push(flows)
}

// noteAlone records, with mu held, that every peer is down now, if it is so and the initial sync
// is done (a node that starts waits for that instead).
func (r *Replicator) noteAlone(now time.Time) {
	if !r.alone.since.IsZero() || !r.initial.Done || len(r.peers) == 0 || r.opts.ResyncOnce {
		return
	}
	for _, p := range r.peers {
		if p.connected {
			return
		}
	}
	r.alone = isolation{since: now}
}

// noteBack records, with mu held, that peer p came up: the end of a time alone, which starts a
// rejoin when this node served nothing meanwhile. It returns the event to tell, if any.
func (r *Replicator) noteBack(p *peer, now time.Time) []Event {
	a := r.alone
	if a.since.IsZero() {
		return nil
	}
	r.alone = isolation{}
	alone := now.Sub(a.since).Round(time.Millisecond)
	if a.served > 0 || r.opts.InitialSyncTimeout == 0 {
		return []Event{{Kind: EventRejoin, Peer: p.addr, Message: fmt.Sprintf(
			"peer %s back after %s alone; this node served %d new flows meanwhile: it goes on serving", p.addr, alone, a.served)}}
	}
	r.alone.rejoin = Rejoin{Pending: true, Peer: p.addr, Since: now}
	return []Event{{Kind: EventRejoin, Peer: p.addr, Message: fmt.Sprintf(
		"peer %s back after %s alone, during which this node served no new flow: it takes traffic again once a full resync from a peer completed (at most %s)",
		p.addr, alone, r.opts.InitialSyncTimeout)}}
}

// rejoined ends, with mu held, a pending rejoin that a peer's completed resync (from, valid) or
// the timeout (from invalid) ends; it returns the event to tell, if any.
func (r *Replicator) rejoined(from netip.Addr, now time.Time) []Event {
	j := r.alone.rejoin
	if !j.Pending {
		return nil
	}
	r.alone.rejoin = Rejoin{}
	if from.IsValid() {
		return []Event{{Kind: EventRejoin, Peer: from, Message: fmt.Sprintf("rejoined: full resync from %s %s after %s came back",
			from, now.Sub(j.Since).Round(time.Millisecond), j.Peer)}}
	}
	return []Event{{Kind: EventRejoin, Peer: j.Peer, Message: fmt.Sprintf(
		"rejoined without a resync: none completed within %s of %s coming back", r.opts.InitialSyncTimeout, j.Peer)}}
}

// rejoinExpired ends, with mu held, a pending rejoin older than InitialSyncTimeout.
func (r *Replicator) rejoinExpired(now time.Time) []Event {
	if j := r.alone.rejoin; j.Pending && now.Sub(j.Since) >= r.opts.InitialSyncTimeout {
		return r.rejoined(netip.Addr{}, now)
	}
	return nil
}

// Rejoining tells whether the node waits for a resync after being cut off from every peer (see
// Rejoin), and since when.
func (r *Replicator) Rejoining() Rejoin {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.alone.rejoin
}
