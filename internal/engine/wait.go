package engine

import (
	"context"
	"fmt"
	"sync"

	"github.com/sluicelb/sluice/internal/plan"
)

// Result is what a change to the running config did: what it changes in the plan, and the config
// generation it made, which Wait follows into the datapath.
type Result struct {
	plan.Change
	// Generation numbers the running config that the change made (the one before when it was a
	// dry run or was refused).
	Generation uint64
}

// generations numbers the running configs and tells which the datapath holds: Wait returns once
// a plan built from a generation at least as recent as the one asked for applied, or failed.
type generations struct {
	mu      sync.Mutex
	current uint64        // the running config's generation
	applied uint64        // the most recent generation whose plan the datapath holds
	failed  uint64        // the most recent generation whose plan failed to apply
	failure error         // and why
	stopped bool          // Run returned: no later generation is applied
	changed chan struct{} // closed, and replaced, when applied, failed or stopped moves
}

func newGenerations() *generations { return &generations{current: 1, changed: make(chan struct{})} }

// next numbers a new running config.
func (g *generations) next() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.current++
	return g.current
}

// last is the running config's generation.
func (g *generations) last() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.current
}

// done records that the plan of generation gen applied (err nil) or failed with err.
func (g *generations) done(gen uint64, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err == nil {
		g.applied = max(g.applied, gen)
	} else if gen >= g.failed {
		g.failed, g.failure = gen, err
	}
	close(g.changed)
	g.changed = make(chan struct{})
}

// stop records that Run returned: the datapath applies no more plans.
func (g *generations) stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopped = true
	close(g.changed)
	g.changed = make(chan struct{})
}

// Generation is the running config's generation: waiting for it waits for every change so far.
func (e *Engine) Generation() uint64 { return e.gens.last() }

// Wait returns once the datapath applied a plan built from generation gen or a later one, or the
// error of the apply of such a plan that failed, or ErrStopped when the engine stopped first
// (Run returned), or ctx's error when it ends first.
func (e *Engine) Wait(ctx context.Context, gen uint64) error {
	for {
		g := e.gens
		g.mu.Lock()
		applied, failed, failure, stopped, changed := g.applied, g.failed, g.failure, g.stopped, g.changed
		g.mu.Unlock()
		switch {
		case applied >= gen:
			return nil
		case failed >= gen:
			return fmt.Errorf("the datapath failed to apply the change: %w", failure)
		case stopped:
			return ErrStopped
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}
