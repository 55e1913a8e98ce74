package flowsync

import (
	"context"
	"time"
)

// The horizon: the time before which every flow the peers made is in this node's flow tables.
// A peer's flows reach this node in order, each within the datapath's report delay (at most 2 ms
// on ebpf) and the queue's and the link's delay of its making; so once a full resync from a peer
// completed, its flows made until horizonMargin before its latest datagram are all here. The
// datapath takes the horizon to end second chance for the table changes before it
// (datapath.FlowReplicator.ReplicatedUntil): a flow without state here then began after the
// change, on a node that placed it by the current table. A flow lost on the way (a full ring or
// queue, a lost datagram, counted) is the exception the margin does not cover.
const (
	// horizonMargin is how far behind a peer's latest datagram its flows are taken as all here.
	horizonMargin = 250 * time.Millisecond
	// horizonEvery is how often the horizon is worked out and, when it moved, handed on.
	horizonEvery = 50 * time.Millisecond
)

// horizon is the earliest of the peers' latest datagrams less horizonMargin; false while none is
// known or a peer has not sent a full resync since it came up. A peer that went down holds the
// horizon at its last datagram until it is back and has sent its table again.
func (r *Replicator) horizon() (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var h time.Time
	for _, p := range r.peers {
		if !p.whole {
			return time.Time{}, false
		}
		if h.IsZero() || p.lastSeen.Before(h) {
			h = p.lastSeen
		}
	}
	if h.IsZero() {
		return time.Time{}, false
	}
	return h.Add(-horizonMargin), true
}

// advanceHorizon tells the datapath of the horizon every horizonEvery it moved, until ctx ends.
func (r *Replicator) advanceHorizon(ctx context.Context) {
	t := time.NewTicker(horizonEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.tellHorizon(ctx)
	}
}

// tellHorizon hands the datapath the horizon if it moved since it was last told.
func (r *Replicator) tellHorizon(ctx context.Context) {
	h, ok := r.horizon()
	r.mu.Lock()
	moved := ok && h.After(r.told)
	r.mu.Unlock()
	if !moved {
		return
	}
	if err := r.dp.ReplicatedUntil(ctx, h); err != nil {
		if ctx.Err() == nil {
			r.warn.warn("horizon", "sync: telling the datapath which flows are here failed", "error", err)
		}
		return
	}
	r.mu.Lock()
	r.told = h
	r.mu.Unlock()
}
