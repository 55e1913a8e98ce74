package engine

import (
	"context"
	"errors"
	"fmt"
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

// nodeDrain is the node's drain state; guarded by Engine.mu.
type nodeDrain struct {
	NodeView
	stop context.CancelFunc // ends the drain's follower; nil when none runs
}

// DrainNode withdraws every VIP of the node from the routers and follows the node's active flows
// until none is left or timeout passes, then publishes a "node_drained" event. Draining a node
// that is draining or drained returns its state as it is.
func (e *Engine) DrainNode(ctx context.Context, timeout time.Duration) (NodeView, error) {
	if timeout <= 0 {
		timeout = DefaultDrainTimeout
	}
	e.mu.Lock()
	if e.node.State != NodeActive {
		view := e.node.NodeView
		e.mu.Unlock()
		return view, nil
	}
	e.mu.Unlock()
	flows, err := e.nodeActiveFlows(ctx)
	if err != nil {
		return NodeView{}, err
	}
	now := time.Now()
	follow, stop := context.WithCancel(context.Background())
	e.mu.Lock()
	if e.node.State != NodeActive { // another drain started meanwhile
		view := e.node.NodeView
		e.mu.Unlock()
		stop()
		return view, nil
	}
	e.node = nodeDrain{stop: stop, NodeView: NodeView{
		State: NodeDraining, Started: now, Deadline: now.Add(timeout), InitialFlows: flows, ActiveFlows: flows,
	}}
	view := e.node.NodeView
	e.mu.Unlock()
	e.publish(Event{Type: EventNodeDrainStarted,
		Message: fmt.Sprintf("every vip withdrawn, %s active, timeout %s", plural(int(flows), "flow"), timeout)})
	e.trigger()
	go e.followNodeDrain(follow)
	return view, nil
}

// UndrainNode ends a node drain: the node announces its VIPs again.
func (e *Engine) UndrainNode() NodeView {
	e.mu.Lock()
	was := e.node.State
	if e.node.stop != nil {
		e.node.stop()
	}
	e.node = nodeDrain{NodeView: NodeView{State: NodeActive}}
	e.mu.Unlock()
	if was != NodeActive {
		e.publish(Event{Type: EventNodeUndrained, Message: "the node announces its vips again (was " + was + ")"})
		e.trigger()
	}
	return e.Node()
}

// Node returns the node's drain state and readiness. A node whose applied services need forwarding
// that its network namespace has off (turned off after the apply) is not ready; the next announce
// withdraws the VIPs of those services (announceable), and the next resync's apply fails on it.
func (e *Engine) Node() NodeView {
	e.mu.Lock()
	view, lastError, applied := e.node.NodeView, e.stats.LastError, e.applied
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
		e.mu.Lock()
		flows, deadline := e.node.ActiveFlows, e.node.Deadline
		e.mu.Unlock()
		reason := ""
		switch {
		case flows == 0:
			reason = "no active flows left"
		case !time.Now().Before(deadline):
			reason = fmt.Sprintf("timeout with %s still active", plural(int(flows), "flow"))
		}
		if reason != "" {
			e.mu.Lock()
			if ctx.Err() != nil { // undrained meanwhile
				e.mu.Unlock()
				return
			}
			e.node.State, e.node.Finished, e.node.Reason = NodeDrained, time.Now(), reason
			e.mu.Unlock()
			e.publish(Event{Type: EventNodeDrained, Message: reason})
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
		e.mu.Lock()
		if ctx.Err() == nil {
			e.node.ActiveFlows = n
		}
		e.mu.Unlock()
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
