// Package engine is Sluice's reconcile loop: it holds the desired state (the config file plus the
// changes made through the API), folds in health, builds the plan and hands it to the datapath,
// which changes only what differs.
package engine

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/sluicelb/sluice/internal/bgp"
	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/health"
	"github.com/sluicelb/sluice/internal/plan"
	"github.com/sluicelb/sluice/internal/state"
)

// Prober runs the health checks; health.Monitor is the real one.
type Prober interface {
	Set(probes []health.Probe)
	Status(key string) (health.Status, bool)
	All() []health.Status
}

// Options configure an engine. Zero values pick the defaults.
type Options struct {
	// ConfigPath is the file Reload reads.
	ConfigPath string
	Datapath   datapath.Datapath
	Log        *slog.Logger
	// Prober replaces the health monitor (tests); it must report changes to Engine.HealthChanged.
	Prober Prober
	// MinApplyInterval is the shortest time between two applies: changes arriving faster (a burst
	// of health flaps, a script of API calls) are folded into one apply. Default 100ms.
	MinApplyInterval time.Duration
	// Resync is how often the plan is applied even without a change, compared with what the
	// kernel holds (Datapath.Resync), repairing a datapath that someone else altered. Default 30s.
	Resync time.Duration
	// DrainPoll is how often a drain reads the active flows. Default 1s.
	DrainPoll time.Duration
	// OnApply observes every datapath apply (metrics).
	OnApply func(took time.Duration, err error)
	// State keeps the running config across restarts: every change is saved to it (nil: none is).
	State *state.Store
	// NewAnnouncer makes the BGP speaker once the config has a bgp section, handing it the
	// function its session events go to. Default: bgp.New.
	NewAnnouncer func(notify func(bgp.Event)) Announcer
	// RouterID finds the BGP identifier when the bgp section names none: the node's first IPv4
	// address. Default: read over netlink in the engine's network namespace.
	RouterID func() (netip.Addr, error)
	// AnnounceInterval is how often the VIPs' announcements are reconsidered without a change
	// (health checks passing for the first time do not change the plan). Default 1s.
	AnnounceInterval time.Duration
	// Replicator replicates the flows' state to the other nodes as the sync section says; nil:
	// a config with a sync section is refused.
	Replicator Replicator
	// ApplyGrace bounds how long a datapath apply in flight when Run's context ends may go on
	// before it is cut (see applyPlan). Default DefaultApplyGrace.
	ApplyGrace time.Duration
}

// ApplyStats summarise the datapath applies so far.
type ApplyStats struct {
	Applies      uint64        `json:"applies"`
	Failures     uint64        `json:"failures"`
	LastDuration time.Duration `json:"last_duration_ns"`
	LastApplied  time.Time     `json:"last_applied"`
	LastError    string        `json:"last_error,omitempty"`
}

// applyStats count the applies, under a lock of their own.
type applyStats struct {
	mu    sync.Mutex
	stats ApplyStats
}

// applied counts an apply that took took.
func (a *applyStats) applied(took time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stats.Applies++
	a.stats.LastDuration, a.stats.LastApplied, a.stats.LastError = took, time.Now(), ""
}

// failed counts an apply that failed with err.
func (a *applyStats) failed(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stats.Failures++
	a.stats.LastError = err.Error()
}

// get returns the counts.
func (a *applyStats) get() ApplyStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats
}

// Engine reconciles the desired state into the datapath.
type Engine struct {
	opts    Options
	log     *slog.Logger
	dp      datapath.Datapath
	prober  Prober
	planner *plan.Builder // keeps the slot tables of unchanged services from plan to plan
	events  *eventLog
	gens    *generations  // which config the datapath holds, for Wait
	dirty   chan struct{} // one pending reconcile
	outside chan string   // changes others made to the datapath (datapath.Watcher), to repair at once

	// Each of these has a lock of its own, taken after mu when both are held, never before
	// (saving's origin and count of changes are under mu, with the config they describe).
	drains drains
	node   nodeDrain
	bgp    announcing
	quorum quorums
	stats  applyStats
	saving saving

	// mu guards the reconcile loop's state: the running config, the plan the datapath holds, the
	// flows to reset, and the planner.
	mu      sync.Mutex
	cfg     *config.Config
	applied *plan.Plan      // last plan the datapath accepted
	resets  map[string]bool // "service/backend" whose flows go once it is out of the table: all (true) or those not established
}

// New returns an engine for a validated config; Run starts it.
func New(cfg *config.Config, opts Options) *Engine {
	if opts.MinApplyInterval == 0 {
		opts.MinApplyInterval = 100 * time.Millisecond
	}
	if opts.Resync == 0 {
		opts.Resync = 30 * time.Second
	}
	if opts.DrainPoll == 0 {
		opts.DrainPoll = time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.AnnounceInterval == 0 {
		opts.AnnounceInterval = time.Second
	}
	if opts.ApplyGrace == 0 {
		opts.ApplyGrace = DefaultApplyGrace
	}
	if opts.RouterID == nil {
		opts.RouterID = firstIPv4Address
	}
	e := &Engine{
		opts: opts, log: opts.Log, dp: opts.Datapath, events: newEventLog(), gens: newGenerations(),
		dirty: make(chan struct{}, 1), outside: make(chan string, 16), cfg: cfg, resets: map[string]bool{}, drains: drains{by: map[string]*drain{}},
		node: nodeDrain{view: NodeView{State: NodeActive}},
	}
	e.planner = plan.NewBuilderWithQuorum(e.quorum.holds)
	if e.opts.NewAnnouncer == nil {
		e.opts.NewAnnouncer = func(notify func(bgp.Event)) Announcer { return bgp.New(opts.Log, notify) }
	}
	e.prober = opts.Prober
	if e.prober == nil {
		e.prober = health.NewMonitor(opts.Log, e.HealthChanged)
	}
	e.startSaving()
	return e
}

// Applied is the plan the datapath last accepted; nil before the first apply.
func (e *Engine) Applied() *plan.Plan {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.applied
}

// Run programs the datapath and keeps it reconciled until ctx ends. An apply in flight then runs
// to its end first (see applyPlan), and Wait answers the changes not applied with ErrStopped. It
// leaves the datapath as it is when it returns: traffic keeps flowing while the daemon restarts.
func (e *Engine) Run(ctx context.Context) error {
	defer e.gens.stop()
	e.mu.Lock()
	e.prober.Set(probes(e.cfg))
	warnings := e.cfg.Warnings()
	e.mu.Unlock()
	for _, w := range warnings {
		e.publish(Event{Type: EventConfigWarning, Message: w})
	}
	if monitor, ok := e.prober.(*health.Monitor); ok {
		defer monitor.Close()
	}
	e.trigger()
	e.watch(ctx)
	go e.watchConntrack(ctx)
	go e.watchUnforwarded(ctx)
	resync := time.NewTicker(e.opts.Resync)
	defer resync.Stop()
	reannounce := time.NewTicker(e.opts.AnnounceInterval)
	defer reannounce.Stop()
	var retry <-chan time.Time
	var outside []string // what others changed, repaired by the next successful reconcile
	var applyErr error   // the last reconcile's
	for {
		force := false
		select {
		case <-ctx.Done():
			return nil
		case <-reannounce.C:
			e.announce(ctx, applyErr)
			continue
		case <-e.dirty:
		case <-resync.C:
			force = true
			e.retrySave()
		case <-retry:
			force = true
		case what := <-e.outside:
			outside = append(outside, what)
		}
		retry = nil
		err := e.reconcile(ctx, force || len(outside) > 0)
		if err != nil && ctx.Err() == nil {
			retry = time.After(time.Second)
		}
		applyErr = err
		e.replicate()
		e.announce(ctx, applyErr)
		if err == nil && len(outside) > 0 {
			e.publish(Event{Type: EventDatapathRepaired, Message: "datapath changed outside Sluice: repaired (" + strings.Join(outside, "; ") + ")"})
			outside = nil
		}
		// Fold whatever arrives during the pause into the next reconcile.
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(e.opts.MinApplyInterval):
		}
	}
}

// watch makes a datapath that can tell when others change what it programmed report it to Run,
// which repairs at once rather than at the next resync.
func (e *Engine) watch(ctx context.Context) {
	w, ok := e.dp.(datapath.Watcher)
	if !ok {
		return
	}
	err := w.Watch(ctx, func(what string) {
		select {
		case e.outside <- what:
		default: // a repair is pending already; this change is noted in the log only
			e.log.Warn("datapath changed outside Sluice", "what", what)
		}
	})
	if err != nil {
		e.log.Warn("not watching the datapath: changes made by others wait for the periodic resync", "err", err)
	}
}

// trigger asks for a reconcile; triggers arriving before it runs fold into one.
func (e *Engine) trigger() {
	select {
	case e.dirty <- struct{}{}:
	default:
	}
}

// reconcile builds the plan and applies it when it differs from the last one applied (always
// when force is set, then compared with the kernel's state), then drops the flows of fallen
// backends whose service asks for it.
func (e *Engine) reconcile(ctx context.Context, force bool) error {
	e.mu.Lock()
	gen := e.gens.last()
	available := e.available(e.cfg)
	p, err := e.planner.Build(e.cfg, available)
	unchanged := e.applied != nil && e.applied.Equal(p)
	var quorums []quorumSeen
	if err == nil {
		quorums = quorumsOf(e.cfg, p, available)
	}
	e.mu.Unlock()
	if err != nil {
		e.gens.done(gen, err)
		return e.applyFailed(err)
	}
	if unchanged && !force {
		e.noteQuorums(ctx, quorums)
		e.gens.done(gen, nil)
		return e.resetFlows(ctx, p)
	}
	if force {
		e.dp.Resync()
	}
	start := time.Now()
	err = e.applyPlan(ctx, p)
	took := time.Since(start)
	if e.opts.OnApply != nil {
		e.opts.OnApply(took, err)
	}
	if err != nil {
		e.gens.done(gen, err)
		return e.applyFailed(err)
	}
	e.mu.Lock()
	e.applied = p
	e.stats.applied(took) // with the plan, for Node to read both as one
	e.mu.Unlock()
	e.noteQuorums(ctx, quorums)
	e.gens.done(gen, nil)
	e.log.Debug("datapath applied", "services", len(p.Services), "took", took)
	if force {
		e.dropStaleOfFallen(ctx, p)
	}
	return e.resetFlows(ctx, p)
}

// dropStaleOfFallen drops, again, the flows that are not established of every backend its health
// check holds down: a connection that was established when the backend fell (kept by on_failure:
// inhibit) turns into a closed conntrack entry once the backend dies, which a client reusing its
// source port would follow to the fallen backend. It runs on every resync.
func (e *Engine) dropStaleOfFallen(ctx context.Context, p *plan.Plan) {
	stale, ok := e.dp.(datapath.StaleFlowDropper)
	if !ok {
		return
	}
	e.mu.Lock()
	available := e.available(e.cfg)
	e.mu.Unlock()
	for i := range p.Services {
		s := &p.Services[i]
		for _, b := range s.Backends {
			if available(s.Name, b) {
				continue
			}
			n, err := stale.DropStaleFlows(ctx, s, b)
			if err != nil {
				e.log.Error("dropping a fallen backend's stale flows failed", "service", s.Name, "backend", b.ID(), "err", err)
			} else if n > 0 {
				e.publish(Event{Type: EventFlowsReset, Service: s.Name, Backend: b.ID(),
					Message: plural(n, "flow") + " not established dropped (the backend is still down)"})
			}
		}
	}
}

func (e *Engine) applyFailed(err error) error {
	e.stats.failed(err)
	e.log.Error("datapath apply failed; will retry", "err", err)
	e.publish(Event{Type: EventApplyFailed, Message: err.Error()})
	return err
}

// resetFlows drops the flows of fallen backends once the applied plan no longer sends new flows
// to them (else the dropped clients would come straight back): every flow under on_failure:
// reset; otherwise those that are not established, which a client reusing a source port would
// follow to the fallen backend (a datapath.StaleFlowDropper's).
func (e *Engine) resetFlows(ctx context.Context, p *plan.Plan) error {
	e.mu.Lock()
	pending := e.resets
	e.resets = map[string]bool{}
	e.mu.Unlock()
	stale, canDropStale := e.dp.(datapath.StaleFlowDropper)
	var errs []error
	for key, all := range pending {
		s, b, ok := p.Backend(key)
		if !ok || b.Weight > 0 || !all && !canDropStale {
			continue // removed meanwhile, or back up before its flows were dropped
		}
		var n int
		var err error
		if all {
			n, err = e.dp.ResetFlows(ctx, s, b)
		} else {
			n, err = stale.DropStaleFlows(ctx, s, b)
		}
		if err != nil {
			errs = append(errs, err)
			e.log.Error("resetting flows failed", "service", s.Name, "backend", b.ID(), "err", err)
			continue
		}
		msg := plural(n, "flow") + " dropped (on_failure: reset)"
		if !all {
			msg = plural(n, "flow") + " not established dropped (on_failure: inhibit keeps the established ones)"
		}
		e.publish(Event{Type: EventFlowsReset, Service: s.Name, Backend: b.ID(), Message: msg})
	}
	return errors.Join(errs...)
}

// Stats returns the apply statistics.
func (e *Engine) Stats() ApplyStats { return e.stats.get() }

// Events returns the events after id (0: all kept).
func (e *Engine) Events(id uint64) []Event {
	events, _ := e.events.since(id)
	return events
}

// WaitEvents returns the events after id, waiting until there is one or ctx ends.
func (e *Engine) WaitEvents(ctx context.Context, id uint64) []Event { return e.events.wait(ctx, id) }

func (e *Engine) publish(ev Event) {
	ev = e.events.publish(ev)
	e.log.Info("event", "type", ev.Type, "service", ev.Service, "backend", ev.Backend, "message", ev.Message)
}
