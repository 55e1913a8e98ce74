package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/plan"
)

// DefaultDrainTimeout bounds a drain when the caller gives no timeout.
const DefaultDrainTimeout = 5 * time.Minute

// Drain states.
const (
	DrainDraining = "draining"
	DrainDrained  = "drained"
)

// DrainView is the progress of one drain: the backend's weight is 0 and its active flows go down
// until none is left or the timeout passes; either way it then counts as drained.
type DrainView struct {
	Service        string    `json:"service"`
	Backend        string    `json:"backend"`
	State          string    `json:"state"`
	Started        time.Time `json:"started"`
	Deadline       time.Time `json:"deadline"`
	Finished       time.Time `json:"finished,omitzero"`
	InitialFlows   uint64    `json:"initial_flows"`
	ActiveFlows    uint64    `json:"active_flows"`
	PreviousWeight int       `json:"previous_weight"`
	// Reason tells why the drain ended: no flows left, or the timeout with how many remained.
	Reason string `json:"reason,omitempty"`
}

// drain is a drain in progress or finished; guarded by Engine.mu.
type drain struct {
	DrainView
	stop context.CancelFunc
}

func (d *drain) view() DrainView { return d.DrainView }

// Drain sets a backend's weight to 0 so that it takes no new flows, and follows its active flows
// until none is left or timeout passes, then publishes a "drained" event. Draining a backend that
// is already draining returns the drain in progress.
func (e *Engine) Drain(ctx context.Context, service, backend string, timeout time.Duration) (DrainView, error) {
	if timeout <= 0 {
		timeout = DefaultDrainTimeout
	}
	var id string
	var previous int
	_, err := e.Update(false, "drain of "+service+" "+backend, func(cfg *config.Config) error {
		s, _, err := FindService(cfg, service)
		if err != nil {
			return err
		}
		b, _, err := FindBackend(s, backend)
		if err != nil {
			return err
		}
		id = configBackendID(s, *b)
		previous = b.WeightOrDefault()
		zero := 0
		b.Weight = &zero
		return nil
	})
	if err != nil {
		return DrainView{}, err
	}
	key := service + "/" + id
	e.mu.Lock()
	if d := e.drains[key]; d != nil && d.State == DrainDraining {
		e.mu.Unlock()
		return d.view(), nil
	}
	e.mu.Unlock()
	flows, err := e.activeFlows(ctx, service, id)
	if err != nil {
		return DrainView{}, err
	}
	now := time.Now()
	watch, stop := context.WithCancel(context.Background())
	d := &drain{stop: stop, DrainView: DrainView{
		Service: service, Backend: id, State: DrainDraining, Started: now, Deadline: now.Add(timeout),
		InitialFlows: flows, ActiveFlows: flows, PreviousWeight: previous,
	}}
	e.mu.Lock()
	if old := e.drains[key]; old != nil {
		old.stop()
	}
	e.drains[key] = d
	e.mu.Unlock()
	e.publish(Event{Type: EventDrainStarted, Service: service, Backend: id,
		Message: fmt.Sprintf("weight %d -> 0, %s active, timeout %s", previous, plural(int(flows), "flow"), timeout)})
	view := d.view()
	go e.followDrain(watch, d)
	return view, nil
}

// Drains lists the drains in progress and the finished ones whose backend is still at weight 0.
func (e *Engine) Drains() []DrainView {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []DrainView
	for _, d := range e.drains {
		out = append(out, d.view())
	}
	return out
}

// followDrain polls the backend's active flows until the drain ends.
func (e *Engine) followDrain(ctx context.Context, d *drain) {
	tick := time.NewTicker(e.opts.DrainPoll)
	defer tick.Stop()
	for {
		e.mu.Lock()
		flows, deadline := d.ActiveFlows, d.Deadline
		e.mu.Unlock()
		switch {
		case flows == 0:
			e.finishDrain(d, "no active flows left")
			return
		case !time.Now().Before(deadline):
			e.finishDrain(d, fmt.Sprintf("timeout with %s still active", plural(int(flows), "flow")))
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		n, err := e.activeFlows(ctx, d.Service, d.Backend)
		if err != nil {
			e.log.Warn("drain: reading active flows failed", "service", d.Service, "backend", d.Backend, "err", err)
			continue
		}
		e.mu.Lock()
		d.ActiveFlows = n
		e.mu.Unlock()
	}
}

func (e *Engine) finishDrain(d *drain, reason string) {
	e.mu.Lock()
	d.State, d.Finished, d.Reason = DrainDrained, time.Now(), reason
	e.mu.Unlock()
	e.publish(Event{Type: EventDrained, Service: d.Service, Backend: d.Backend, Message: reason})
}

// cancelStaleDrains forgets the drains whose backend is gone or weighted again; e.mu is held.
func (e *Engine) cancelStaleDrains() {
	for key, d := range e.drains {
		s, _, err := FindService(e.cfg, d.Service)
		var b *config.Backend
		if err == nil {
			b, _, err = FindBackend(s, d.Backend)
		}
		if err == nil && b.WeightOrDefault() == 0 {
			continue
		}
		d.stop()
		delete(e.drains, key)
		if d.State == DrainDraining {
			e.events.publish(Event{Type: EventDrainCanceled, Service: d.Service, Backend: d.Backend,
				Message: "the backend was removed or weighted again"})
		}
	}
}

// activeFlows reads one backend's active flows from the datapath.
func (e *Engine) activeFlows(ctx context.Context, service, id string) (uint64, error) {
	status, err := e.dp.Status(ctx)
	if err != nil {
		return 0, err
	}
	for _, s := range status {
		if s.Name != service {
			continue
		}
		for _, b := range s.Backends {
			if BackendID(b.Address, b.Port) == id {
				return b.ActiveFlows, nil
			}
		}
	}
	return 0, nil
}

// configBackendID is the ID of a config backend of a service, as the plan and datapath name it.
func configBackendID(s *config.Service, b config.Backend) string {
	port := b.Port
	if s.Mode.Direct() {
		port = 0
	}
	return plan.Backend{Addr: b.Address.Addr, Port: uint16(port)}.ID()
}
