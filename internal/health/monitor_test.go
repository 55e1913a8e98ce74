package health

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/testutil"
)

// scripted is a fake network for monitor tests: its checkers probe targets whose behaviour the
// test sets.
type scripted struct {
	built atomic.Int64 // checkers built

	mu      sync.Mutex
	targets map[netip.AddrPort]*scriptedTarget
}

// scriptedTarget is one target of a scripted network.
type scriptedTarget struct {
	ok    atomic.Bool // probes pass
	block atomic.Bool // probes wait for their context to end
	// active counts probes in progress; live counts probes started with a live context, after
	// incrementing active, so once a probe is stopped and active is 0, live no longer moves.
	active, live atomic.Int64
}

func newScripted() *scripted {
	return &scripted{targets: map[netip.AddrPort]*scriptedTarget{}}
}

// target returns the scripted target at addr (failing until told otherwise).
func (s *scripted) target(addr string) *scriptedTarget {
	s.mu.Lock()
	defer s.mu.Unlock()
	ap := netip.MustParseAddrPort(addr)
	if s.targets[ap] == nil {
		s.targets[ap] = &scriptedTarget{}
	}
	return s.targets[ap]
}

func (s *scripted) newChecker(*config.HealthCheck) (Checker, error) {
	s.built.Add(1)
	return s, nil
}

func (s *scripted) Check(ctx context.Context, addr netip.AddrPort) Result {
	start := time.Now()
	t := s.target(addr.String())
	t.active.Add(1)
	defer t.active.Add(-1)
	if ctx.Err() == nil {
		t.live.Add(1)
	}
	if t.block.Load() {
		<-ctx.Done()
		reason, _ := interrupted(ctx, start)
		return failed(start, reason)
	}
	if t.ok.Load() {
		return passed(start, "scripted success")
	}
	return failed(start, "scripted failure")
}

// newTestMonitor returns a monitor probing through fake (or the real checkers when fake is nil),
// logging to the test and closed when the test ends.
func newTestMonitor(t *testing.T, fake *scripted, onChange func(Status)) *Monitor {
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	m := NewMonitor(log, onChange)
	if fake != nil {
		m.newChecker = fake.newChecker
	}
	t.Cleanup(m.Close)
	return m
}

// probe is a check of target every 10ms with the given thresholds.
func probe(checkType, target string, rise, fall int) Probe {
	return Probe{
		Check:  config.HealthCheck{Type: config.CheckType(checkType), Interval: config.DurationOf("10ms"), Timeout: config.DurationOf("1s"), Rise: rise, Fall: fall},
		Target: netip.MustParseAddrPort(target),
	}
}

// changes queues the statuses a monitor reports to onChange.
type changes chan Status

func newChanges() changes { return make(changes, 16) }

func (c changes) record(s Status) { c <- s }

// next returns the next change, failing the test if none comes.
func (c changes) next(t *testing.T) Status {
	t.Helper()
	select {
	case s := <-c:
		return s
	case <-time.After(5 * time.Second):
		t.Fatal("timed out waiting for a probe to change")
		return Status{}
	}
}

func TestMonitorRiseAndFall(t *testing.T) {
	fake := newScripted()
	target := fake.target("192.0.2.1:80")
	target.ok.Store(true)
	changed := newChanges()
	var m *Monitor
	m = newTestMonitor(t, fake, func(s Status) {
		m.All() // would deadlock if the monitor held its lock
		changed.record(s)
	})
	p := probe("tcp", "192.0.2.1:80", 2, 3)
	m.Set([]Probe{p})
	if s, ok := m.Status(p.Key()); !ok || !s.Up || s.Key != p.Key() || s.Type != "tcp" || s.Target != p.Target {
		t.Fatalf("Status after Set = %+v, %v; want the probe, up", s, ok)
	}
	testutil.Eventually(t, "two probes", func() bool { return target.live.Load() >= 2 })

	target.ok.Store(false)
	down := changed.next(t)
	if down.Up || down.Failures != 3 || down.Successes != 0 || down.Last.Message != "scripted failure" {
		t.Fatalf("change = %+v, want down after 3 failures", down)
	}
	target.ok.Store(true)
	up := changed.next(t)
	if !up.Up || up.Successes != 2 || up.Failures != 0 || !up.Since.After(down.Since) {
		t.Fatalf("change = %+v, want up after 2 successes, since after %v", up, down.Since)
	}
	if s, _ := m.Status(p.Key()); !s.Up || !s.Since.Equal(up.Since) || s.Checks < up.Checks {
		t.Errorf("Status = %+v, want up since %v", s, up.Since)
	}
}

func TestMonitorSharesEqualProbes(t *testing.T) {
	fake := newScripted()
	target := fake.target("192.0.2.1:80")
	m := newTestMonitor(t, fake, nil)
	a := probe("tcp", "192.0.2.1:80", 2, 3)
	b := a
	b.Check.OnFailure = "reset"
	m.Set([]Probe{a, b, a})
	if all := m.All(); len(all) != 1 || fake.built.Load() != 1 {
		t.Fatalf("All = %+v with %d checkers built, want one shared probe", all, fake.built.Load())
	}
	testutil.Eventually(t, "probes", func() bool { return target.live.Load() >= 2 })
	before, _ := m.Status(a.Key())

	m.Set([]Probe{b}) // the same key again: nothing restarts
	after, _ := m.Status(a.Key())
	if fake.built.Load() != 1 || after.Checks < before.Checks || !after.Since.Equal(before.Since) {
		t.Errorf("after setting the same probe: %d checkers built, status %+v, was %+v",
			fake.built.Load(), after, before)
	}
}

func TestMonitorSetStopsRemovedProbes(t *testing.T) {
	fake := newScripted()
	kept, removed := fake.target("192.0.2.1:80"), fake.target("192.0.2.2:80")
	m := newTestMonitor(t, fake, nil)
	keep, remove := probe("tcp", "192.0.2.1:80", 2, 3), probe("tcp", "192.0.2.2:80", 2, 3)
	m.Set([]Probe{keep, remove})
	testutil.Eventually(t, "both probed", func() bool { return kept.live.Load() > 0 && removed.live.Load() > 0 })

	m.Set([]Probe{keep})
	if _, ok := m.Status(remove.Key()); ok {
		t.Error("a removed probe still has a status")
	}
	if all := m.All(); len(all) != 1 || all[0].Key != keep.Key() {
		t.Errorf("All = %+v, want only the kept probe", all)
	}
	testutil.Eventually(t, "the removed probe to finish", func() bool { return removed.active.Load() == 0 })
	stoppedAt, keptAt := removed.live.Load(), kept.live.Load()
	testutil.Eventually(t, "the kept probe to go on", func() bool { return kept.live.Load() >= keptAt+3 })
	if n := removed.live.Load(); n != stoppedAt {
		t.Errorf("the removed probe ran %d more times", n-stoppedAt)
	}
}

func TestMonitorSlowProbeBlocksNothing(t *testing.T) {
	fake := newScripted()
	slow, fast := fake.target("192.0.2.1:80"), fake.target("192.0.2.2:80")
	slow.block.Store(true)
	m := newTestMonitor(t, fake, nil)
	slowProbe, fastProbe := probe("tcp", "192.0.2.1:80", 2, 3), probe("tcp", "192.0.2.2:80", 2, 3)
	slowProbe.Check.Timeout, slowProbe.Check.Interval = config.DurationOf("1h"), config.DurationOf("1h")
	m.Set([]Probe{slowProbe, fastProbe})
	testutil.Eventually(t, "the slow probe to start", func() bool { return slow.active.Load() == 1 })
	testutil.Eventually(t, "the fast probe to run 3 times", func() bool { return fast.live.Load() >= 3 })
	if s, ok := m.Status(slowProbe.Key()); !ok || s.Checks != 0 || !s.Up {
		t.Errorf("slow probe status = %+v, %v; want up with no check finished", s, ok)
	}
	m.Set([]Probe{fastProbe}) // stops the slow probe mid-check
	testutil.Eventually(t, "the slow probe to be canceled", func() bool { return slow.active.Load() == 0 })
}

func TestMonitorTimeoutEndsProbe(t *testing.T) {
	fake := newScripted()
	fake.target("192.0.2.1:80").block.Store(true)
	changed := newChanges()
	m := newTestMonitor(t, fake, changed.record)
	p := probe("tcp", "192.0.2.1:80", 1, 1)
	p.Check.Timeout = config.DurationOf("20ms")
	m.Set([]Probe{p})
	if s := changed.next(t); s.Up || s.Last.Message != "timed out after 20ms" {
		t.Errorf("change = %+v, want down, timed out after 20ms", s)
	}
}

func TestMonitorCloseWaits(t *testing.T) {
	fake := newScripted()
	target := fake.target("192.0.2.1:80")
	target.block.Store(true)
	m := newTestMonitor(t, fake, nil)
	p := probe("tcp", "192.0.2.1:80", 2, 3)
	p.Check.Timeout, p.Check.Interval = config.DurationOf("1h"), config.DurationOf("1h")
	m.Set([]Probe{p})
	testutil.Eventually(t, "the probe to start", func() bool { return target.active.Load() == 1 })

	m.Close()
	if n := target.active.Load(); n != 0 {
		t.Fatalf("%d probes still running after Close", n)
	}
	m.Set([]Probe{p})
	if all := m.All(); len(all) != 0 || fake.built.Load() != 1 {
		t.Errorf("Set after Close started %+v", all)
	}
	m.Close() // twice is fine
}

func TestMonitorBrokenCheckFalls(t *testing.T) {
	changed := newChanges()
	m := newTestMonitor(t, nil, changed.record)
	m.Set([]Probe{probe("ldap", "192.0.2.1:80", 1, 1)})
	if s := changed.next(t); s.Up || !strings.Contains(s.Last.Message, `cannot check: unknown health check type "ldap"`) {
		t.Errorf("change = %+v, want down because the check cannot run", s)
	}
}

func TestMonitorTCPBackendGoesAndComes(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	changed := newChanges()
	m := newTestMonitor(t, nil, changed.record)
	p := probe("tcp", addr, 1, 1)
	m.Set([]Probe{p})
	testutil.Eventually(t, "a successful probe", func() bool {
		s, _ := m.Status(p.Key())
		return s.Last.OK
	})

	l.Close()
	if s := changed.next(t); s.Up || s.Last.Message != "connection refused" {
		t.Fatalf("change = %+v, want down, connection refused", s)
	}
	if l, err = net.Listen("tcp", addr); err != nil {
		t.Fatalf("listening again on %s: %v", addr, err)
	}
	defer l.Close()
	if s := changed.next(t); !s.Up || s.Last.Message != "connected" {
		t.Fatalf("change = %+v, want up, connected", s)
	}
}
