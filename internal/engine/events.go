package engine

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Event is something an operator wants to be told about: a backend going down or up, a drain
// finishing, a reload, a failed apply.
type Event struct {
	ID      uint64    `json:"id"`
	Time    time.Time `json:"time"`
	Type    string    `json:"type"`
	Service string    `json:"service,omitempty"`
	Backend string    `json:"backend,omitempty"`
	Message string    `json:"message"`
	// Count is how many times this same event (type, service, backend and message) happened,
	// when more than once: a repeat is not kept twice, it moves the event to the end of the log
	// with a new ID, Time the last time and First the first.
	Count uint64    `json:"count,omitempty"`
	First time.Time `json:"first,omitzero"`
}

// repeats tells whether e and o are the same event, but for when it happened.
func (e Event) repeats(o Event) bool {
	return e.Type == o.Type && e.Service == o.Service && e.Backend == o.Backend && e.Message == o.Message
}

// Event types.
const (
	EventBackendDown   = "backend_down"
	EventBackendUp     = "backend_up"
	EventFlowsReset    = "flows_reset"
	EventDrainStarted  = "drain_started"
	EventDrained       = "drained"
	EventDrainCanceled = "drain_canceled"
	EventConfigChanged = "config_changed"
	// EventConfigWarning: the running config holds something that may not do what it means
	// (config.Warnings); published at start and when a change brings it.
	EventConfigWarning = "config_warning"
	EventApplyFailed   = "apply_failed"
	// EventReloadFailed: a reload (SIGHUP, sluice reload) found a file that does not load or
	// validate; the running config stays. The message has the file:line errors.
	EventReloadFailed = "reload_failed"
	// EventConntrackHigh: the datapath's conntrack table passed 80% of its maximum;
	// EventConntrackNormal: it fell back under 70%.
	EventConntrackHigh   = "conntrack_high"
	EventConntrackNormal = "conntrack_normal"
	// EventDatapathRepaired: someone else changed what the datapath programmed; it was repaired.
	EventDatapathRepaired = "datapath_repaired"
	// BGP: a VIP announced to or withdrawn from the routers (the message says why), a session
	// that came up or went down, the speaker failing to configure or announce.
	EventVIPAnnounced = "vip_announced"
	EventVIPWithdrawn = "vip_withdrawn"
	EventBGPPeerUp    = "bgp_peer_up"
	EventBGPPeerDown  = "bgp_peer_down"
	EventBGPFailed    = "bgp_failed"
	// Node drain: started (every VIP withdrawn), finished (no active flows left, or the timeout),
	// and ended by undrain.
	EventNodeDrainStarted = "node_drain_started"
	EventNodeDrained      = "node_drained"
	EventNodeUndrained    = "node_undrained"
	// Quorum: a service's available weight fell below its quorum (less the hysteresis), or came
	// back to it (plus the hysteresis); its quorum_down or quorum_up command failed.
	EventQuorumLost          = "quorum_lost"
	EventQuorumRegained      = "quorum_regained"
	EventQuorumCommandFailed = "quorum_command_failed"
)

// eventLogSize is how many events are kept for late readers.
const eventLogSize = 1024

// eventLog is a bounded log of events that readers can wait on.
type eventLog struct {
	mu     sync.Mutex
	events []Event
	nextID uint64
	wake   chan struct{} // closed and replaced on every publish
}

func newEventLog() *eventLog { return &eventLog{nextID: 1, wake: make(chan struct{})} }

// publish adds e to the log. An event the log holds already (Event.repeats) is not added again:
// the one held moves to the end with a new ID and counts the repeat, so that a failure repeated
// every second does not push every other event out of the log.
func (l *eventLog) publish(e Event) Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	e.ID = l.nextID
	l.nextID++
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	if i := slices.IndexFunc(l.events, e.repeats); i >= 0 {
		held := l.events[i]
		e.Count, e.First = max(held.Count, 1)+1, held.First
		if e.First.IsZero() {
			e.First = held.Time
		}
		l.events = slices.Delete(l.events, i, i+1)
	}
	l.events = append(l.events, e)
	if len(l.events) > eventLogSize {
		l.events = append([]Event(nil), l.events[len(l.events)-eventLogSize:]...)
	}
	close(l.wake)
	l.wake = make(chan struct{})
	return e
}

// since returns the events with an ID above id, and a channel closed when more arrive.
func (l *eventLog) since(id uint64) ([]Event, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Event
	for _, e := range l.events {
		if e.ID > id {
			out = append(out, e)
		}
	}
	return out, l.wake
}

// wait returns the events after id, blocking until there is at least one or ctx ends.
func (l *eventLog) wait(ctx context.Context, id uint64) []Event {
	for {
		events, wake := l.since(id)
		if len(events) > 0 {
			return events
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		}
	}
}
