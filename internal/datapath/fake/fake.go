// Package fake is a recording datapath for tests of what drives a datapath: it keeps the last
// plan, counts calls and reports flows the test sets.
package fake

import (
	"context"
	"sync"

	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/plan"
)

// Datapath records what it is asked to do; it is safe for concurrent use.
type Datapath struct {
	mu      sync.Mutex
	plan    *plan.Plan
	applies int
	resyncs int
	fail    error
	active  map[string]uint64 // service/backend ID -> active flows
	stale   map[string]uint64 // service/backend ID -> flows that are not established
	resets  []string          // service/backend ID, in call order
	drops   []string          // service/backend ID of DropStaleFlows, in call order
	budget  int               // the most services Budget accepts; 0: any number
}

var (
	_ datapath.Datapath         = (*Datapath)(nil)
	_ datapath.StaleFlowDropper = (*Datapath)(nil)
	_ datapath.Budgeter         = (*Datapath)(nil)
)

// New returns an empty fake datapath.
func New() *Datapath { return &Datapath{active: map[string]uint64{}, stale: map[string]uint64{}} }

// Apply records the plan, or returns the error set by FailWith without recording anything.
func (d *Datapath) Apply(_ context.Context, p *plan.Plan) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fail != nil {
		return d.fail
	}
	d.applies++
	d.plan = p
	return nil
}

// Resync counts the call.
func (d *Datapath) Resync() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.resyncs++
}

// Status reports the last plan with the active flows set by SetActiveFlows.
func (d *Datapath) Status(context.Context) ([]datapath.ServiceStatus, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.plan == nil {
		return nil, nil
	}
	var out []datapath.ServiceStatus
	for _, s := range d.plan.Services {
		st := datapath.ServiceStatus{
			Name: s.Name, Protocol: s.Protocol, VIP: s.VIP.String(), Ports: s.Ports.String(),
			Mode: s.Mode, Scheduler: s.Scheduler, Slots: len(s.Slots),
		}
		share := s.Share()
		for i, b := range s.Backends {
			bs := datapath.BackendStatus{
				Address: b.Addr.String(), Port: int(b.Port), Weight: b.Weight, Share: share[i],
				ActiveFlows: d.active[s.Name+"/"+b.ID()],
			}
			if !s.Uncounted || s.Mode.Direct() { // what nft counts; nothing passes here
				bs.Packets, bs.Bytes = new(uint64), new(uint64)
			}
			st.Backends = append(st.Backends, bs)
		}
		out = append(out, st)
	}
	return out, nil
}

// ResetFlows records the call and clears the backend's flows, active and stale.
func (d *Datapath) ResetFlows(_ context.Context, s *plan.Service, b plan.Backend) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	key := s.Name + "/" + b.ID()
	n := d.active[key] + d.stale[key]
	delete(d.active, key)
	delete(d.stale, key)
	d.resets = append(d.resets, key)
	return int(n), nil
}

// DropStaleFlows records the call and clears the backend's stale flows.
func (d *Datapath) DropStaleFlows(_ context.Context, s *plan.Service, b plan.Backend) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	key := s.Name + "/" + b.ID()
	n := d.stale[key]
	delete(d.stale, key)
	d.drops = append(d.drops, key)
	return int(n), nil
}

// Flush forgets the plan.
func (d *Datapath) Flush(context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.plan = nil
	return nil
}

// Plan returns the last applied plan (nil before the first Apply or after Flush).
func (d *Datapath) Plan() *plan.Plan {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.plan
}

// Applies counts the successful Apply calls.
func (d *Datapath) Applies() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.applies
}

// Resyncs counts the Resync calls.
func (d *Datapath) Resyncs() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.resyncs
}

// FailWith makes every following Apply return err (nil: succeed again).
func (d *Datapath) FailWith(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fail = err
}

// SetActiveFlows sets the active flows Status reports for a backend ID ("10.0.0.1:80") of a service.
func (d *Datapath) SetActiveFlows(service, backend string, n uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.active[service+"/"+backend] = n
}

// SetStaleFlows sets the flows that are not established (not counted as active) of a backend ID
// of a service.
func (d *Datapath) SetStaleFlows(service, backend string, n uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stale[service+"/"+backend] = n
}

// StaleDrops lists the "service/backend" pairs DropStaleFlows was called for, in order.
func (d *Datapath) StaleDrops() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.drops...)
}

// Resets lists the "service/backend" pairs ResetFlows was called for, in order.
func (d *Datapath) Resets() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.resets...)
}

// SetBudget makes Budget refuse plans of more than n services (0: any number).
func (d *Datapath) SetBudget(n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.budget = n
}

// Budget refuses a plan of more services than SetBudget allows, as the key "fake.max_services".
func (d *Datapath) Budget(p *plan.Plan) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.budget == 0 || len(p.Services) <= d.budget {
		return nil
	}
	return &datapath.BudgetError{Field: "fake.max_services", What: "services", Need: len(p.Services), Limit: d.budget, Instead: "remove some"}
}
