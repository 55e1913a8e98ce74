package nft

import (
	"fmt"
	"net/netip"

	"github.com/sluicelb/sluice/internal/plan"
)

// desired is a plan rendered into the content of Sluice's tables, kept apart by owner: the base
// (tables, base chains, the sets every service adds elements to) and each service. Kept as what
// was last committed, it lets the next apply render and compare only the services that changed.
type desired struct {
	base *state
	// dsrDevices are the devices base takes dsr traffic on.
	dsrDevices []string
	services   map[string]*renderedService // by name
}

// renderedService is one service as rendered: its plan, the devices its dsr backends were reached
// through, and its state until released. A released service's state is rendered again from the
// other two when needed, so that what was committed costs a plan's memory, not its elements'.
type renderedService struct {
	service plan.Service
	devices map[netip.Addr]string
	st      *state
}

// renderPlan renders a plan. The services of prev (nil: none) whose plan is unchanged are not
// rendered again: they are reused, the same pointer; with recheckRoutes, only when the routes to
// their dsr backends still lead out of the devices they were rendered with.
func renderPlan(p *plan.Plan, env Environment, prev *desired, recheckRoutes bool) (*desired, error) {
	base, err := renderBase(p, env)
	if err != nil {
		return nil, err
	}
	d := &desired{base: base, dsrDevices: env.DSRDevices, services: make(map[string]*renderedService, len(p.Services))}
	for i := range p.Services {
		s := &p.Services[i]
		if old := prev.service(s.Name); old != nil && old.service.Equal(s) && (!recheckRoutes || old.routesHold(env)) {
			d.services[s.Name] = old
			continue
		}
		if d.services[s.Name], err = newRenderedService(s, env); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// newRenderedService renders s, recording the devices it asks env for.
func newRenderedService(s *plan.Service, env Environment) (*renderedService, error) {
	r := &renderedService{service: *s}
	record := env
	record.DeviceTo = func(a netip.Addr) (string, error) {
		dev, err := env.DeviceTo(a)
		if r.devices == nil {
			r.devices = map[netip.Addr]string{}
		}
		r.devices[a] = dev
		return dev, err
	}
	var err error
	r.st, err = renderService(s, record)
	return r, err
}

// state returns the service's state, rendered again with the recorded devices once released.
func (r *renderedService) state() (*state, error) {
	if r.st != nil {
		return r.st, nil
	}
	return renderService(&r.service, Environment{DeviceTo: r.deviceTo})
}

// routesHold tells whether every backend the service was rendered towards is still reached
// through the same device.
func (r *renderedService) routesHold(env Environment) bool {
	for a, dev := range r.devices {
		if now, err := env.DeviceTo(a); err != nil || now != dev {
			return false
		}
	}
	return true
}

func (r *renderedService) deviceTo(a netip.Addr) (string, error) {
	if dev, ok := r.devices[a]; ok {
		return dev, nil
	}
	return "", fmt.Errorf("no device recorded for %s", a)
}

// service returns the rendered service of that name, nil if there is none (or d is nil).
func (d *desired) service(name string) *renderedService {
	if d == nil {
		return nil
	}
	return d.services[name]
}

// release drops the services' states: d is kept as what was committed.
func (d *desired) release() {
	for _, s := range d.services {
		s.st = nil
	}
}

// all is the whole content of the tables.
func (d *desired) all() (*state, error) {
	parts := make([]*renderedService, 0, len(d.services))
	for _, s := range d.services {
		parts = append(parts, s)
	}
	return compose(d.base, parts)
}

// changes returns the part of d and of next that differs, as the before and after states to
// reconcile: both bases, with the services added, removed or changed (unchanged ones are the
// same pointer in both).
func (d *desired) changes(next *desired) (before, after *state, err error) {
	var old, changed []*renderedService
	for name, s := range next.services {
		if prev := d.services[name]; prev != s {
			changed = append(changed, s)
			if prev != nil {
				old = append(old, prev)
			}
		}
	}
	for name, prev := range d.services {
		if next.services[name] == nil {
			old = append(old, prev)
		}
	}
	if before, err = compose(d.base, old); err != nil {
		return nil, nil, err
	}
	after, err = compose(next.base, changed)
	return before, after, err
}

// compose is a copy of base with the objects and elements of the services added.
func compose(base *state, services []*renderedService) (*state, error) {
	st := base.clone()
	for _, s := range services {
		part, err := s.state()
		if err != nil {
			return nil, fmt.Errorf("service %s: %w", s.service.Name, err)
		}
		st.include(part)
	}
	return st, nil
}
