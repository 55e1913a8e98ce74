package health

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicelb/sluice/internal/config"
)

// Monitor runs probes, each in its own goroutine every interval, and tracks rise/fall state.
//
// Probes start up (optimistic), so restarting the daemon never pulls a live backend.
type Monitor struct {
	log      *slog.Logger
	onChange func(Status)
	// newChecker builds checkers; tests replace it to script results.
	newChecker func(*config.HealthCheck) (Checker, error)

	mu      sync.Mutex
	running map[string]*run // by Probe.Key
	closed  bool
	wg      sync.WaitGroup // one per run's goroutine
}

// run is one probe being run. Its status is guarded by Monitor.mu.
type run struct {
	probe   Probe
	checker Checker
	stop    context.CancelFunc // called with Monitor.mu held, when the run leaves Monitor.running
	status  Status
}

// NewMonitor returns a monitor that calls onChange each time a probe's Up flips.
//
// onChange runs on the probe's goroutine, never with the monitor's lock held, so it may call the
// monitor; calls for one probe come in order.
func NewMonitor(log *slog.Logger, onChange func(Status)) *Monitor {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if onChange == nil {
		onChange = func(Status) {}
	}
	return &Monitor{log: log, onChange: onChange, newChecker: NewChecker, running: map[string]*run{}}
}

// Set makes probes the whole running set (new keys start, missing keys stop, the rest keep state).
//
// Equal probes share one run. Set does not wait for stopped probes to finish their last check;
// their results are dropped. After Close, Set does nothing.
func (m *Monitor) Set(probes []Probe) {
	want := make(map[string]Probe, len(probes))
	for _, p := range probes {
		want[p.Key()] = p
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	for key, r := range m.running {
		if _, ok := want[key]; !ok {
			r.stop()
			delete(m.running, key)
		}
	}
	for key, p := range want {
		if _, ok := m.running[key]; !ok {
			m.start(key, p)
		}
	}
}

// start begins running probe p under key; m.mu is held.
func (m *Monitor) start(key string, p Probe) {
	checker, err := m.newChecker(&p.Check)
	if err != nil {
		m.log.Error("health check cannot run", "key", key, "target", p.Target, "err", err)
		checker = brokenChecker{err}
	}
	ctx, stop := context.WithCancel(context.Background())
	r := &run{
		probe:   p,
		checker: checker,
		stop:    stop,
		status:  Status{Key: key, Type: p.Check.Type, Target: p.Target, Up: true, Since: time.Now()},
	}
	m.running[key] = r
	m.wg.Go(func() { m.loop(ctx, r) })
}

// loop probes at once, then every interval, until ctx ends.
func (m *Monitor) loop(ctx context.Context, r *run) {
	interval := r.probe.Check.IntervalOrDefault()
	if interval <= 0 {
		interval = config.DefaultCheckInterval
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		m.probeOnce(ctx, r)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// probeOnce runs one check and records its result, reporting a flip of Up.
func (m *Monitor) probeOnce(ctx context.Context, r *run) {
	checkCtx, cancel := context.WithTimeout(ctx, r.probe.Check.TimeoutOrDefault())
	result := r.checker.Check(checkCtx, r.probe.Target)
	cancel()

	m.mu.Lock()
	if ctx.Err() != nil { // stopped while checking: the run is gone and so is its status
		m.mu.Unlock()
		return
	}
	flipped := r.status.record(result, r.probe.Check.Rise, r.probe.Check.Fall)
	status := r.status
	m.mu.Unlock()

	if !result.OK {
		m.log.Debug("health check failed", "key", status.Key, "target", status.Target,
			"message", result.Message, "failures", status.Failures)
	}
	if flipped {
		m.log.Info("backend "+upOrDown(status.Up), "key", status.Key, "target", status.Target,
			"message", result.Message)
		m.onChange(status)
	}
}

func upOrDown(up bool) string {
	if up {
		return "up"
	}
	return "down"
}

// Status returns the state of the probe with this key.
func (m *Monitor) Status(key string) (Status, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.running[key]
	if !ok {
		return Status{}, false
	}
	return r.status, true
}

// All returns the state of every probe, sorted by key.
func (m *Monitor) All() []Status {
	m.mu.Lock()
	all := make([]Status, 0, len(m.running))
	for _, r := range m.running {
		all = append(all, r.status)
	}
	m.mu.Unlock()
	slices.SortFunc(all, func(a, b Status) int { return strings.Compare(a.Key, b.Key) })
	return all
}

// Close stops every probe and waits for their goroutines.
func (m *Monitor) Close() {
	m.mu.Lock()
	m.closed = true
	for key, r := range m.running {
		r.stop()
		delete(m.running, key)
	}
	m.mu.Unlock()
	m.wg.Wait()
}
