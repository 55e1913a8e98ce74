package health

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/config"
)

func TestProbeKey(t *testing.T) {
	target := netip.MustParseAddrPort("10.0.0.1:80")
	base := Probe{Target: target, Check: config.HealthCheck{Type: "http", Path: "/healthz", Interval: config.DurationOf("2s"),
		Rise: 2, Fall: 3, OnFailure: "inhibit"}}
	same := func(edit func(p *Probe)) Probe {
		p := base
		edit(&p)
		return p
	}
	for _, tc := range []struct {
		name  string
		probe Probe
		equal bool
	}{
		{"identical", same(func(*Probe) {}), true},
		{"on_failure differs", same(func(p *Probe) { p.Check.OnFailure = "reset" }), true},
		{"port is in the target", same(func(p *Probe) { p.Check.Port = 80 }), true},
		{"interval spelled differently", same(func(p *Probe) { p.Check.Interval = config.DurationOf("2000ms") }), true},
		{"default timeout spelled out", same(func(p *Probe) { p.Check.Timeout = config.DurationOf("1s") }), true},
		{"path differs", same(func(p *Probe) { p.Check.Path = "/ready" }), false},
		{"rise differs", same(func(p *Probe) { p.Check.Rise = 1 }), false},
		{"expected status differs", same(func(p *Probe) {
			p.Check.ExpectStatus = []config.Range{{First: 200, Last: 200}}
		}), false},
		{"target port differs", same(func(p *Probe) { p.Target = netip.MustParseAddrPort("10.0.0.1:81") }), false},
		{"target address differs", same(func(p *Probe) { p.Target = netip.MustParseAddrPort("10.0.0.2:80") }), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.probe.Key() == base.Key(); got != tc.equal {
				t.Errorf("keys equal = %v, want %v:\n%s\n%s", got, tc.equal, tc.probe.Key(), base.Key())
			}
		})
	}
	if key := base.Key(); !strings.HasSuffix(key, "@10.0.0.1:80") || strings.Contains(key, "inhibit") {
		t.Errorf("key %q: want the check without on_failure, then @target", key)
	}
}

func TestStatusRecord(t *testing.T) {
	const rise, fall = 2, 3
	// Each step: the probe's result, then Up and the streaks after recording it.
	steps := []struct {
		ok                  bool
		up, flipped         bool
		successes, failures int
	}{
		{false, true, false, 0, 1},
		{false, true, false, 0, 2},
		{true, true, false, 1, 0}, // a success breaks the failure streak
		{false, true, false, 0, 1},
		{false, true, false, 0, 2},
		{false, false, true, 0, 3}, // fall
		{false, false, false, 0, 4},
		{true, false, false, 1, 0},
		{false, false, false, 0, 1}, // a failure breaks the success streak
		{true, false, false, 1, 0},
		{true, true, true, 2, 0}, // rise
		{true, true, false, 3, 0},
	}
	start := time.Now()
	s := Status{Up: true, Since: start}
	var failed uint64
	for i, step := range steps {
		if !step.ok {
			failed++
		}
		at := start.Add(time.Duration(i+1) * time.Second)
		since := s.Since
		flipped := s.record(Result{OK: step.ok, At: at}, rise, fall)
		if flipped != step.flipped || s.Up != step.up || s.Successes != step.successes ||
			s.Failures != step.failures || s.Checks != uint64(i+1) || s.FailedChecks != failed || s.Last.At != at {
			t.Fatalf("step %d (ok=%v): flipped=%v %+v, want flipped=%v up=%v successes=%d failures=%d",
				i, step.ok, flipped, s, step.flipped, step.up, step.successes, step.failures)
		}
		wantSince := since
		if flipped {
			wantSince = at
		}
		if !s.Since.Equal(wantSince) {
			t.Fatalf("step %d: Since = %v, want %v", i, s.Since, wantSince)
		}
	}
}
