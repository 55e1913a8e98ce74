package engine

import (
	"context"
	"fmt"
	"sync"
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

// drain is a drain in progress or finished; guarded by drains.mu.
type drain struct {
	DrainView
	stop context.CancelFunc
}

// drains are the backends' drains by "service/backend", under a lock of their own: the API and
// the followers read and update them without the engine's.
type drains struct {
	mu sync.Mutex
	by map[string]*drain
}

// draining is the drain of key in progress, if there is one.
func (ds *drains) draining(key string) (DrainView, bool) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if d := ds.by[key]; d != nil && d.State == DrainDraining {
		return d.DrainView, true
	}
	return DrainView{}, false
}

// start makes d the drain of key, stopping the one it replaces.
func (ds *drains) start(key string, d *drain) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if old := ds.by[key]; old != nil {
		old.stop()
	}
	ds.by[key] = d
}

// list is every drain kept.
func (ds *drains) list() []DrainView {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	var out []DrainView
	for _, d := range ds.by {
		out = append(out, d.DrainView)
	}
	return out
}

// view is the drain of key, nil when there is none.
func (ds *drains) view(key string) *DrainView {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if d := ds.by[key]; d != nil {
		view := d.DrainView
		return &view
	}
	return nil
}

// progress is what d has left: its active flows and its deadline.
func (ds *drains) progress(d *drain) (flows uint64, deadline time.Time) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	return d.ActiveFlows, d.Deadline
}

// setFlows records d's active flows.
func (ds *drains) setFlows(d *drain, n uint64) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	d.ActiveFlows = n
}

// finish ends d for reason and returns its drained event.
func (ds *drains) finish(d *drain, reason string) Event {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	d.State, d.Finished, d.Reason = DrainDrained, time.Now(), reason
	return Event{Type: EventDrained, Service: d.Service, Backend: d.Backend, Message: reason}
}

// cancelStale forgets the drains whose backend cfg no longer holds at weight 0, and returns the
// events of those it cancelled in progress.
func (ds *drains) cancelStale(cfg *config.Config) []Event {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	var out []Event
	for key, d := range ds.by {
		s, _, err := FindService(cfg, d.Service)
		var b *config.Backend
		if err == nil {
			b, _, err = FindBackend(s, d.Backend)
		}
		if err == nil && b.WeightOrDefault() == 0 {
			continue
		}
		d.stop()
		delete(ds.by, key)
		if d.State == DrainDraining {
			out = append(out, Event{Type: EventDrainCanceled, Service: d.Service, Backend: d.Backend,
				Message: "the backend was removed or weighted again"})
		}
	}
	return out
}

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
	if view, ok := e.drains.draining(key); ok {
		return view, nil
	}
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
	view := d.DrainView
	e.drains.start(key, d)
	e.publish(Event{Type: EventDrainStarted, Service: service, Backend: id,
		Message: fmt.Sprintf("weight %d -> 0, %s active, timeout %s", previous, plural(int(flows), "flow"), timeout)})
	go e.followDrain(watch, d)
	return view, nil
}

// Drains lists the drains in progress and the finished ones whose backend is still at weight 0.
func (e *Engine) Drains() []DrainView { return e.drains.list() }

// followDrain polls the backend's active flows until the drain ends.
func (e *Engine) followDrain(ctx context.Context, d *drain) {
	tick := time.NewTicker(e.opts.DrainPoll)
	defer tick.Stop()
	for {
		flows, deadline := e.drains.progress(d)
		switch {
		case flows == 0:
			e.publish(e.drains.finish(d, "no active flows left"))
			return
		case !time.Now().Before(deadline):
			e.publish(e.drains.finish(d, fmt.Sprintf("timeout with %s still active", plural(int(flows), "flow"))))
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
		e.drains.setFlows(d, n)
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
