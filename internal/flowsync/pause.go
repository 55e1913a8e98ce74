package flowsync

import (
	"fmt"
	"time"
)

// Pause and Resume: with ResyncOnce, the table a Replicator carries takes its live changes from
// another replicator (conntrackd, for the kernel's conntrack table), which can stop for a while
// without the node restarting: it crashed, and is started again. The changes of that time are
// lost both ways: the connections the node served meanwhile never reach its peers, nor theirs
// the node. While paused, a Replicator sends no heartbeat, so that its peers see it go silent
// when its changes stopped reaching them. Resume gives it a new node id, so that its peers see
// it restart and ask it for the flows it saw a packet of since it went silent, and asks each
// peer for the flows that peer saw a packet of since the pause: in both directions, what was
// served meanwhile, and none of the copies a node holds of flows that may have ended at their
// owner meanwhile.

// EventPause: the table stopped or started again taking in its peers' changes.
const EventPause EventKind = "sync_pause"

// Pause stops the heartbeats: the table has taken in and sent no change since at. A Replicator
// paused already keeps its first time.
func (r *Replicator) Pause(at time.Time) {
	r.mu.Lock()
	first := r.pausedSince.IsZero()
	if first {
		r.pausedSince = at
	}
	r.mu.Unlock()
	if first {
		r.notify(Event{Kind: EventPause, Message: fmt.Sprintf("paused: the table's live changes stopped at %s; its peers no longer hear this node",
			at.Format(time.RFC3339Nano))})
	}
}

// Resume ends a pause (nothing if there is none): a new node id, and each peer asked (at once if
// it is up, else when it comes up) for the flows it saw a packet of since the pause began.
func (r *Replicator) Resume() error {
	r.mu.Lock()
	since := r.pausedSince
	r.mu.Unlock()
	if since.IsZero() {
		return nil
	}
	id, err := newNodeID(r.node.Load())
	if err != nil {
		return err
	}
	// The new id is taken between two datagrams: one sealed with the old id leaves before any
	// with the new.
	r.sendMu.Lock()
	r.node.Store(id)
	r.sendMu.Unlock()
	var up []*peer
	r.mu.Lock()
	r.pausedSince = time.Time{}
	for _, p := range r.peers {
		if p.askSince.IsZero() || since.Before(p.askSince) {
			p.askSince = since
		}
		if p.connected {
			up = append(up, p)
		}
	}
	r.mu.Unlock()
	r.notify(Event{Kind: EventPause, Message: fmt.Sprintf("resumed as node %016x after %s: asking each peer for the flows it served since",
		id, time.Since(since).Round(time.Millisecond))})
	for _, p := range up {
		r.askResync(p)
	}
	return nil
}

// paused tells whether the Replicator is paused.
func (r *Replicator) paused() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.pausedSince.IsZero()
}
