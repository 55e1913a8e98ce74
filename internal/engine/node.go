package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/plan"
)

// Node states: an active node announces its VIPs; a draining or drained one withdraws them all
// and keeps forwarding the flows that still reach it.
const (
	NodeActive   = "active"
	NodeDraining = "draining"
	NodeDrained  = "drained"
)

// NodeView is the node's drain state: while draining, its VIPs are withdrawn and its active flows
// (over every service) go down until none is left or the timeout passes; either way it then
// counts as drained, until undrained.
type NodeView struct {
	State        string    `json:"state"`
	Started      time.Time `json:"started,omitzero"`
	Deadline     time.Time `json:"deadline,omitzero"`
	Finished     time.Time `json:"finished,omitzero"`
	InitialFlows uint64    `json:"initial_flows"`
	ActiveFlows  uint64    `json:"active_flows"`
	// Reason tells why the drain ended: no flows left, or the timeout with how many remained.
	Reason string `json:"reason,omitempty"`
	// Ready tells whether the node should take traffic: it is active, its datapath applied the
	// config, and a VIP of it can take new flows (what BGP announces, and what keepalived's
	// track script checks); Why says why.
	Ready bool   `json:"ready"`
	Why   string `json:"why"`
}

// nodeDrain is the node's drain state, under a lock of its own.
type nodeDrain struct {
	mu   sync.Mutex
	view NodeView
	stop context.CancelFunc // ends the drain's follower; nil when none runs
}

// get returns the drain state.
func (n *nodeDrain) get() NodeView {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.view
}

// state is the node's state: NodeActive, NodeDraining or NodeDrained.
func (n *nodeDrain) state() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.view.State
}

// begin starts a drain as view, followed until stop, unless one began meanwhile: it returns the
// state then, and whether this drain began.
func (n *nodeDrain) begin(view NodeView, stop context.CancelFunc) (NodeView, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.view.State != NodeActive {
		return n.view, false
	}
	n.view, n.stop = view, stop
	return view, true
}

// end makes the node active again, stopping the drain's follower; it returns the state before.
func (n *nodeDrain) end() (was string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	was = n.view.State
	if n.stop != nil {
		n.stop()
	}
	n.view, n.stop = NodeView{State: NodeActive}, nil
	return was
}

// progress is what the drain has left: its active flows and its deadline.
func (n *nodeDrain) progress() (flows uint64, deadline time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.view.ActiveFlows, n.view.Deadline
}

// setFlows records the drain's active flows, unless it ended (ctx, its follower's, is done).
func (n *nodeDrain) setFlows(ctx context.Context, flows uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if ctx.Err() == nil {
		n.view.ActiveFlows = flows
	}
}

// finish marks the node drained for reason, unless it was undrained meanwhile (ctx, the
// follower's, is done); it tells whether it did.
func (n *nodeDrain) finish(ctx context.Context, reason string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if ctx.Err() != nil {
		return false
	}
	n.view.State, n.view.Finished, n.view.Reason = NodeDrained, time.Now(), reason
	return true
}

// DrainNode withdraws every VIP of the node from the routers and follows the node's active flows
// until none is left or timeout passes, then publishes a "node_drained" event. Draining a node
// that is draining or drained returns its state as it is.
func (e *Engine) DrainNode(ctx context.Context, timeout time.Duration) (NodeView, error) {
	if timeout <= 0 {
		timeout = DefaultDrainTimeout
	}
	if view := e.node.get(); view.State != NodeActive {
		return view, nil
	}
	flows, err := e.nodeActiveFlows(ctx)
	if err != nil {
		return NodeView{}, err
	}
	now := time.Now()
	follow, stop := context.WithCancel(context.Background())
	view, began := e.node.begin(NodeView{
		State: NodeDraining, Started: now, Deadline: now.Add(timeout), InitialFlows: flows, ActiveFlows: flows,
	}, stop)
	if !began { // another drain started meanwhile
		stop()
		return view, nil
	}
	e.publish(Event{Type: EventNodeDrainStarted,
		Message: fmt.Sprintf("every vip withdrawn, %s active, timeout %s", plural(int(flows), "flow"), timeout)})
	e.trigger()
	go e.followNodeDrain(follow)
	return view, nil
}

// UndrainNode ends a node drain: the node announces its VIPs again.
func (e *Engine) UndrainNode() NodeView {
	if was := e.node.end(); was != NodeActive {
		e.publish(Event{Type: EventNodeUndrained, Message: "the node announces its vips again (was " + was + ")"})
		e.trigger()
	}
	return e.Node()
}

// Node returns the node's drain state and readiness. A node whose applied services need forwarding
// that its network namespace has off (turned off after the apply) is not ready; the next announce
// withdraws the VIPs of those services (announceable), and the next resync's apply fails on it.
func (e *Engine) Node() NodeView {
	view := e.node.get()
	e.mu.Lock()
	lastError, applied := e.stats.get().LastError, e.applied
	e.mu.Unlock()
	if err := e.checkForwarding(applied); err != nil {
		view.Why = err.Error()
		return view
	}
	var applyErr error
	if lastError != "" {
		applyErr = errors.New(lastError)
	}
	ready := 0
	var why string
	decisions := e.decide(applyErr)
	for _, d := range decisions {
		if d.view.Announced {
			ready++
		} else if why == "" {
			why = d.view.VIP + " " + d.view.Reason
		}
	}
	switch {
	case ready > 0:
		view.Ready, view.Why = true, fmt.Sprintf("%d of %d vips can take new flows", ready, len(decisions))
		if why != "" {
			view.Why += "; " + why
		}
	case len(decisions) == 0:
		view.Why = "no services"
	default:
		view.Why = why
	}
	return view
}

// checkForwarding asks a datapath that relies on the kernel forwarding whether the applied plan's
// services have the forwarding they need.
func (e *Engine) checkForwarding(applied *plan.Plan) error {
	c, ok := e.dp.(datapath.ForwardingChecker)
	if !ok || applied == nil {
		return nil
	}
	return c.CheckForwarding(applied)
}

// followNodeDrain polls the node's active flows until the drain ends.
func (e *Engine) followNodeDrain(ctx context.Context) {
	tick := time.NewTicker(e.opts.DrainPoll)
	defer tick.Stop()
	for {
		flows, deadline := e.node.progress()
		reason := ""
		switch {
		case flows == 0:
			reason = "no active flows left"
		case !time.Now().Before(deadline):
			reason = fmt.Sprintf("timeout with %s still active", plural(int(flows), "flow"))
		}
		if reason != "" {
			if e.node.finish(ctx, reason) { // else undrained meanwhile
				e.publish(Event{Type: EventNodeDrained, Message: reason})
			}
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		n, err := e.nodeActiveFlows(ctx)
		if err != nil {
			e.log.Warn("node drain: reading active flows failed", "err", err)
			continue
		}
		e.node.setFlows(ctx, n)
	}
}

// nodeActiveFlows is the sum of every backend's active flows in the datapath.
func (e *Engine) nodeActiveFlows(ctx context.Context) (uint64, error) {
	status, err := e.dp.Status(ctx)
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, s := range status {
		for _, b := range s.Backends {
			n += b.ActiveFlows
		}
	}
	return n, nil
}
