package engine

import (
	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/replication"
)

// Events of the replication of flows between nodes (the sync section).
const (
	// EventSyncPeerUp, EventSyncPeerDown: a sync peer was heard again, or not for three heartbeats.
	EventSyncPeerUp   = "sync_peer_up"
	EventSyncPeerDown = "sync_peer_down"
	// EventSyncResync: a full resync from a peer ended, or a resync after a lapse.
	EventSyncResync = "sync_resync"
	// EventSyncInitial: the node has the peers' flows (or went ahead without, past the timeout).
	EventSyncInitial = "sync_initial"
	// EventSyncRejoin: a node cut off from every peer got one back: it waits for a resync before
	// it takes traffic (it served nothing while alone), or goes on (it did); then the resync came.
	EventSyncRejoin = "sync_rejoin"
	// EventSyncPause: conntrackd stopped unasked, so the conntrack table's resync went silent;
	// or it runs again, and the nodes ask each other for what they served meanwhile.
	EventSyncPause = "sync_pause"
	// EventSyncFailed: the replication the sync section asks for could not start (retried).
	EventSyncFailed = "sync_failed"
)

// Replicator replicates the state of the flows to the other balancer nodes, as the config's sync
// section says (replication.Runner). Set takes the whole config each time.
type Replicator interface {
	// Check tells whether Set could run cfg's sync section on this host, changing nothing.
	Check(cfg *config.Config) error
	// Set runs what cfg's sync section asks for; nothing when it already does.
	Set(cfg *config.Config) error
	// Ready tells whether the node has the flows' state it needs before it takes traffic, and why.
	Ready() (bool, string)
	// Status is the replication's state, for `sluice sync` and the metrics.
	Status() replication.Status
}

// Sync returns the replication's state; a daemon without a Replicator replicates nothing.
func (e *Engine) Sync() replication.Status {
	if e.opts.Replicator == nil {
		return replication.Status{Ready: true, Why: "no sync section"}
	}
	return e.opts.Replicator.Status()
}

// SyncEvent publishes an event of the replication, of one of the EventSync kinds; another kind
// is logged and dropped.
func (e *Engine) SyncEvent(kind, message string) {
	switch kind {
	case EventSyncPeerUp, EventSyncPeerDown, EventSyncResync, EventSyncInitial, EventSyncFailed:
		e.publish(Event{Type: kind, Message: message})
	default:
		e.log.Warn("sync: an event of an unknown kind", "kind", kind, "message", message)
	}
}

// checkSync refuses a change whose sync section this host cannot run, naming the field.
func (e *Engine) checkSync(next *config.Config) error {
	if e.opts.Replicator == nil {
		if next.Sync != nil {
			return config.Errors{{Path: "sync", Msg: "this daemon runs no replication"}}
		}
		return nil
	}
	return e.opts.Replicator.Check(next)
}

// replicate hands the running config to the Replicator; a failure is an event, and retried at
// the next reconcile.
func (e *Engine) replicate() {
	if e.opts.Replicator == nil {
		return
	}
	if err := e.opts.Replicator.Set(e.running()); err != nil {
		e.log.Error("sync: the replication did not start; will retry", "err", err)
		e.publish(Event{Type: EventSyncFailed, Message: err.Error()})
	}
}

// syncReady tells whether the replication lets the node take traffic, and why not.
func (e *Engine) syncReady() (bool, string) {
	if e.opts.Replicator == nil {
		return true, ""
	}
	return e.opts.Replicator.Ready()
}
