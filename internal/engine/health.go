package engine

import (
	"fmt"
	"net/netip"
	"sort"
	"time"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/health"
	"github.com/sluicelb/sluice/internal/plan"
)

// HealthView is one health probe as an operator reads it; services sharing a probe are listed together.
type HealthView struct {
	Services []string         `json:"services"`
	Type     config.CheckType `json:"type"`
	Target   netip.AddrPort   `json:"target"`
	State    string           `json:"state"` // "up" or "down"
	Since    time.Time        `json:"since"`
	Checks   uint64           `json:"checks"`
	// FailedChecks counts the checks that failed, in all.
	FailedChecks uint64 `json:"failed_checks"`
	// Successes and Failures are the current streak: consecutive checks that passed, or failed
	// (down, or up but failing); one of them is 0.
	Successes int           `json:"successes"`
	Failures  int           `json:"failures"`
	Latency   time.Duration `json:"last_latency_ns"`
	Message   string        `json:"last_message"`
}

// probeOf is the probe of one backend of a service, and whether the backend is checked at all.
func probeOf(s *config.Service, addr netip.Addr, port uint16) (health.Probe, bool) {
	hc := checkOf(s, addr, port)
	if hc == nil {
		return health.Probe{}, false
	}
	switch {
	case hc.Port != 0:
		port = uint16(hc.Port)
	case port == 0:
		port = uint16(s.AllPorts().Canonical().First())
	}
	return health.Probe{Check: *hc, Target: netip.AddrPortFrom(addr, port)}, true
}

// checkOf is the health check of the backend of s at addr and port (as plan.BackendOf makes
// them): its own, else the service's.
func checkOf(s *config.Service, addr netip.Addr, port uint16) *config.HealthCheck {
	for i := range s.Backends {
		if s.Backends[i].HealthCheck == nil {
			continue
		}
		if pb, err := plan.BackendOf(s.Backends[i], s.Mode); err == nil && pb.Addr == addr && pb.Port == port {
			return s.Backends[i].HealthCheck
		}
	}
	return s.HealthCheck
}

// probes lists the probes a config needs: one per checked backend (sorry servers are not checked).
func probes(cfg *config.Config) []health.Probe {
	var out []health.Probe
	for i := range cfg.Services {
		s := &cfg.Services[i]
		for _, b := range s.Backends {
			pb, err := plan.BackendOf(b, s.Mode)
			if err != nil {
				continue
			}
			if p, ok := probeOf(s, pb.Addr, pb.Port); ok {
				out = append(out, p)
			}
		}
	}
	return out
}

// available tells the plan which backends health allows new flows to.
func (e *Engine) available(cfg *config.Config) plan.Availability {
	byName := map[string]*config.Service{}
	for i := range cfg.Services {
		byName[cfg.Services[i].Name] = &cfg.Services[i]
	}
	return func(service string, b plan.Backend) bool {
		s := byName[service]
		if s == nil {
			return true
		}
		p, checked := probeOf(s, b.Addr, b.Port)
		if !checked {
			return true
		}
		st, ok := e.prober.Status(p.Key())
		return !ok || st.Up
	}
}

// HealthChanged is told by the prober that a probe went up or down: every service using that
// probe is re-planned, and a fall schedules the reset of the backend's flows: all of them with
// on_failure: reset, those not established otherwise.
func (e *Engine) HealthChanged(st health.Status) {
	e.mu.Lock()
	var affected []string
	for i := range e.cfg.Services {
		s := &e.cfg.Services[i]
		for _, b := range s.Backends {
			pb, err := plan.BackendOf(b, s.Mode)
			if err != nil {
				continue
			}
			p, ok := probeOf(s, pb.Addr, pb.Port)
			if !ok || p.Key() != st.Key {
				continue
			}
			affected = append(affected, s.Name+"/"+pb.ID())
			if key := s.Name + "/" + pb.ID(); !st.Up {
				e.resets[key] = e.resets[key] || p.Check.OnFailure == config.OnFailureReset
			}
		}
	}
	e.mu.Unlock()
	kind, verb := EventBackendUp, "up"
	if !st.Up {
		kind, verb = EventBackendDown, "down"
	}
	for _, key := range affected {
		service, backend := splitKey(key)
		e.publish(Event{Type: kind, Service: service, Backend: backend,
			Message: fmt.Sprintf("%s check of %s is %s: %s", st.Type, st.Target, verb, st.Last.Message)})
	}
	e.trigger()
}

// Health lists every probe with the services that use it.
func (e *Engine) Health() []HealthView {
	cfg := e.running()
	users := map[string][]string{}
	for i := range cfg.Services {
		s := &cfg.Services[i]
		for _, p := range probes(&config.Config{Services: []config.Service{*s}}) {
			users[p.Key()] = appendUnique(users[p.Key()], s.Name)
		}
	}
	var out []HealthView
	for _, st := range e.prober.All() {
		if users[st.Key] == nil {
			continue
		}
		state := "up"
		if !st.Up {
			state = "down"
		}
		out = append(out, HealthView{
			Services: users[st.Key], Type: st.Type, Target: st.Target, State: state, Since: st.Since,
			Checks: st.Checks, FailedChecks: st.FailedChecks, Successes: st.Successes, Failures: st.Failures,
			Latency: st.Last.Latency, Message: st.Last.Message,
		})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Target.String() < out[j].Target.String() })
	return out
}

func appendUnique(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}
