package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicelb/sluice/internal/plan"
)

// DefaultApplyGrace is how long an apply in flight when the daemon is told to stop may go on by
// default (Options.ApplyGrace).
const DefaultApplyGrace = 30 * time.Second

// ErrStopped is why Wait returns for a change the datapath did not apply because the daemon
// stopped: the change is the running config, saved as state.persist says, and the next start
// applies the running config.
var ErrStopped = errors.New("the daemon stopped before the datapath applied the change")

// applyPlan hands p to the datapath under a context that the daemon's stop (ctx ending) does not
// cut at once: a datapath apply may take several transactions (nft), and one cut midway leaves
// the kernel holding part of the plan. The apply runs on to its end, up to Options.ApplyGrace
// after ctx ends, which the log tells; past it, it is cut and its error wraps ErrStopped.
func (e *Engine) applyPlan(ctx context.Context, p *plan.Plan) error {
	applyCtx, cut := context.WithCancel(context.WithoutCancel(ctx))
	defer cut()
	done := make(chan struct{})
	defer close(done)
	defer context.AfterFunc(ctx, func() {
		e.log.Info("stopping: the datapath apply in flight runs to its end first", "at most", e.opts.ApplyGrace)
		select {
		case <-done:
			e.log.Info("stopping: the datapath apply in flight ended")
		case <-time.After(e.opts.ApplyGrace):
			e.log.Error("stopping: the datapath apply in flight did not end in time and is cut: the kernel may hold part of the change; the next start applies the running config", "grace", e.opts.ApplyGrace)
			cut()
		}
	})()
	err := e.dp.Apply(applyCtx, p)
	if err != nil && applyCtx.Err() != nil {
		return fmt.Errorf("%w: the apply was cut %s after the stop began: %w", ErrStopped, e.opts.ApplyGrace, err)
	}
	return err
}
