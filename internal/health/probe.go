package health

import (
	"encoding/json"
	"net/netip"
	"time"

	"github.com/sluicelb/sluice/internal/config"
)

// Probe is one check of one target; probes with equal keys are run once and shared.
type Probe struct {
	Check  config.HealthCheck
	Target netip.AddrPort
}

// Key identifies the probe: the check's probing fields as canonical JSON, "@", the target.
//
// OnFailure is left out (it is about flows, not probing) and so is Port (the target already
// carries the probed port); Interval and Timeout are written as parsed durations, so "2s" and
// "2000ms" share a probe.
func (p Probe) Key() string {
	c := p.Check
	c.OnFailure = ""
	c.Port = 0
	c.Interval = config.DurationFrom(c.IntervalOrDefault())
	c.Timeout = config.DurationFrom(c.TimeoutOrDefault())
	text, _ := json.Marshal(c) // a HealthCheck always encodes
	return string(text) + "@" + p.Target.String()
}

// Status is the state of one probe.
type Status struct {
	Key    string
	Type   config.CheckType
	Target netip.AddrPort
	Up     bool
	Since  time.Time // when Up last changed, or when the probe started
	Checks uint64    // probes run
	// FailedChecks counts the probes that failed, in all.
	FailedChecks uint64
	// Successes and Failures count the current streak of consecutive results; one is always 0.
	Successes, Failures int
	Last                Result
}

// record counts a result and applies the thresholds: fall consecutive failures take an up probe
// down, rise consecutive successes bring a down one up. It reports whether Up flipped.
func (s *Status) record(r Result, rise, fall int) (flipped bool) {
	s.Checks++
	s.Last = r
	if r.OK {
		s.Successes++
		s.Failures = 0
		flipped = !s.Up && s.Successes >= rise
	} else {
		s.FailedChecks++
		s.Failures++
		s.Successes = 0
		flipped = s.Up && s.Failures >= fall
	}
	if flipped {
		s.Up = !s.Up
		s.Since = r.At
	}
	return flipped
}
