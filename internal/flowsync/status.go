package flowsync

import (
	"net/netip"
	"time"
)

// Status is what a Replicator did, for `sluice sync` and the sluice_sync_* metrics: counters only
// grow.
type Status struct {
	// NodeID is this node's id, chosen at random when the Replicator was made and at each
	// Resume.
	NodeID      uint64
	InitialSync InitialSync
	// PausedSince is when a pause began (see Pause); zero: not paused.
	PausedSince time.Time
	// Rejoin is pending while the node, back from being cut off from every peer, waits for a
	// resync (see Rejoining).
	Rejoin Rejoin
	// QueueLength flows wait to be sent, of at most QueueLimit; QueueDrops were dropped when it
	// was full; OldestQueued is how long the oldest waiting one has waited.
	QueueLength  int
	QueueLimit   int
	QueueDrops   uint64
	OldestQueued time.Duration
	// Unencodable counts the flows the datapath gave that the wire format cannot carry.
	Unencodable uint64
	// SendErrors counts the datagrams the kernel refused to send (no route, unreachable).
	SendErrors uint64
	// Drops counts the datagrams dropped, by reason, from any address (each peer's own are in
	// its PeerStatus too).
	Drops map[DropReason]uint64
	// Refreshes counts the refreshes sent in full (to the peers connected when each began);
	// RefreshesSkipped those not begun because the one before was still running when they were
	// due; RefreshErrors those the datapath failed to list the flows of.
	Refreshes        uint64
	RefreshesSkipped uint64
	RefreshErrors    uint64
	// ReplicatedUntil is the latest horizon the datapath was told of: every flow the peers made
	// before it is here (zero: none yet, or a peer has not sent a full resync since it came up).
	ReplicatedUntil time.Time
	Peers           []PeerStatus
}

// PeerStatus is what a node knows of a peer.
type PeerStatus struct {
	Address netip.Addr
	// NodeID is the peer's current node id (0 until heard).
	NodeID uint64
	// Connected: a valid datagram came from it in the last three heartbeat intervals.
	Connected bool
	LastSeen  time.Time
	// SentEntries and ReceivedEntries count flow records, in updates, resyncs and refreshes.
	SentEntries     uint64
	ReceivedEntries uint64
	// SendErrors counts the datagrams to it the kernel refused (no route, unreachable).
	SendErrors uint64
	// ImportErrors counts the batches from it the datapath failed to import; Skipped the flows
	// it did not take, by the datapath's reason.
	ImportErrors uint64
	Skipped      map[string]uint64
	// Drops counts the datagrams from its address dropped, by reason.
	Drops map[DropReason]uint64
	// Lag is the latest update's or heartbeat's time of arrival minus its sender's clock.
	Lag time.Duration
	// LastResync is the last full resync this node received from the peer; LastServed the last
	// it sent it.
	LastResync Resync
	LastServed Resync
	// LastRefresh is the last refresh this node sent the peer in full.
	LastRefresh Refresh
}

// Refresh is a refresh of a node's active flows sent in full.
type Refresh struct {
	// At is when it ended (zero: none yet).
	At time.Time
	// Entries is how many flow records it sent each peer; Duration how long it took, paced.
	Entries  uint64
	Duration time.Duration
}

// Resync is a full resync that ended.
type Resync struct {
	// At is when it ended (zero: none yet).
	At time.Time
	// Entries is how many flow records came (or went); Total how many the sender counted.
	Entries  uint64
	Total    uint64
	Duration time.Duration
}

// InitialSync tells whether the state a node needs before it takes traffic is there.
type InitialSync struct {
	// Done: a peer's full resync completed since Run, or InitialSyncTimeout passed.
	Done bool
	// WithoutPeer: it is done only because InitialSyncTimeout passed (or was 0) before any peer
	// completed a resync.
	WithoutPeer bool
	// Peer is the one whose resync completed first, if any.
	Peer netip.Addr
	At   time.Time
}

// EventKind is the kind of an Event.
type EventKind string

// The event kinds.
const (
	EventPeerUp   EventKind = "sync_peer_up"
	EventPeerDown EventKind = "sync_peer_down"
	// EventResync: a full resync from a peer ended.
	EventResync EventKind = "sync_resync"
	// EventInitialSync: the initial sync is done (with a peer's resync, or without).
	EventInitialSync EventKind = "sync_initial"
)

// Event is something an operator wants to be told about a peer.
type Event struct {
	Kind    EventKind
	Peer    netip.Addr
	Message string
}
