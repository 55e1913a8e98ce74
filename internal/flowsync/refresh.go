package flowsync

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicelb/sluice/internal/datapath"
)

// refreshLoop starts a refresh every RefreshInterval (none with NoRefresh) until ctx ends, and
// waits for the last one; a refresh due while the one before is still running is skipped and
// counted, never run alongside it.
func (r *Replicator) refreshLoop(ctx context.Context) {
	if r.opts.NoRefresh {
		return
	}
	t := time.NewTicker(r.opts.RefreshInterval)
	defer t.Stop()
	var running atomic.Bool
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !running.CompareAndSwap(false, true) {
			r.mu.Lock()
			r.refreshesSkipped++
			r.mu.Unlock()
			continue
		}
		wg.Go(func() {
			defer running.Store(false)
			r.refresh(ctx)
		})
	}
}

// refresh sends every active flow of the datapath, paced, to the peers connected now (or the
// group, if one is), in refresh datagrams.
func (r *Replicator) refresh(ctx context.Context) {
	to, peers := r.refreshTargets()
	if len(peers) == 0 {
		return
	}
	start := time.Now()
	n, err := r.sendTable(ctx, msgRefresh, resyncRef{}, to)
	if ctx.Err() != nil {
		return
	}
	now := time.Now()
	res := Refresh{At: now, Entries: n, Duration: now.Sub(start)}
	r.mu.Lock()
	if err != nil {
		r.refreshErrors++
	} else {
		r.refreshes++
		for _, p := range peers {
			p.status.LastRefresh = res
		}
	}
	r.mu.Unlock()
	if err != nil {
		r.warn.warn("refresh", "sync: refresh of the peers failed", "error", err)
	}
}

// refreshTargets are where a refresh goes (the connected peers, or the group) and the peers it
// reaches.
func (r *Replicator) refreshTargets() ([]netip.AddrPort, []*peer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var to []netip.AddrPort
	var peers []*peer
	for _, p := range r.peers {
		if p.connected {
			peers = append(peers, p)
			to = append(to, r.dest(p.addr))
		}
	}
	if r.opts.Group.IsValid() && len(peers) > 0 {
		to = r.targets
	}
	return to, peers
}

// sendTable sends to each of to every active flow of the datapath in datagrams of kind (with
// ref), paced to ResyncRate for all of them together, and returns how many flows each was
// sent. A flow's idle time is aged by the time since the walk began, so that the pacing never
// makes a flow look more recent on the receiver than it is here: two nodes refreshing each
// other's copies back cannot keep an idle flow alive.
func (r *Replicator) sendTable(ctx context.Context, kind msgType, ref resyncRef, to []netip.AddrPort) (uint64, error) {
	enc := newEncoder(r.opts.MTU)
	enc.reset(kind, ref)
	var total uint64
	flush := func() error {
		if err := r.pacer.wait(ctx, len(to)*(len(enc.buf)+macSize)); err != nil {
			return err
		}
		r.send(enc, to, nil)
		total += uint64(enc.count)
		return nil
	}
	var failed error
	start := time.Now()
	err := r.dp.SnapshotFlows(ctx, func(f datapath.ReplicatedFlow) bool {
		f.Idle += time.Since(start)
		failed = r.pack(enc, &f, flush)
		return failed == nil
	})
	if err == nil && failed == nil && !enc.empty() {
		failed = flush()
	}
	if err != nil {
		return total, err
	}
	return total, failed
}
