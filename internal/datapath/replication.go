package datapath

import (
	"context"
	"net/netip"
	"time"

	"github.com/sluicelb/sluice/internal/config"
)

// ReplicatedFlow is one flow a balancer node tracks, in the form another node can take it in:
// by addresses and ports, never by the node's own service and backend ids, which differ between
// nodes.
type ReplicatedFlow struct {
	Protocol config.Protocol
	// Client is the flow's source as it reaches the balancer.
	Client netip.AddrPort
	// Listener is its destination: the service's VIP and the port the client used.
	Listener netip.AddrPort
	// Backend is the backend it was given (port 0: a dsr backend, which takes the client's port).
	Backend netip.AddrPort
	// NATSource is the balancer-side source of a fullnat flow (the address and port its packets
	// reach the backend from); zero for other modes.
	NATSource netip.AddrPort
	// Closing tells that the client sent a FIN or RST.
	Closing bool
	// Idle is the time since its last packet, when it was read.
	Idle time.Duration
	// TCPState is the conntrack TCP state (1 to 10) of a TCP flow of the kernel's conntrack
	// table (internal/cttable); 0 for the ebpf datapath's flows, which tell only Closing.
	TCPState uint8
}

// FlowReplicator is a Datapath whose flows other nodes take in, so that a flow that moves to
// another node (a VRRP takeover or fail-back, ECMP, a restart) keeps its backend and translation.
type FlowReplicator interface {
	// WatchFlows calls emit, from one goroutine, with batches of the flows created or closed from
	// now on, until ctx ends; it returns once watching has started.
	WatchFlows(ctx context.Context, emit func([]ReplicatedFlow)) error
	// SnapshotFlows calls fn with every active flow (for a peer's full resync) until fn returns
	// false.
	SnapshotFlows(ctx context.Context, fn func(ReplicatedFlow) bool) error
	// ImportFlows writes flows a peer replicated into the flow tables, as if this node had seen
	// their first packet; a flow this node cannot take (no such service or backend here, another
	// NAT source) is skipped and counted by reason.
	ImportFlows(ctx context.Context, flows []ReplicatedFlow) (ImportResult, error)
	// LostFlows counts the flows created or closed that WatchFlows could not report (its buffer
	// was full) since the datapath's tables were made; the peers learn them at the next refresh.
	LostFlows(ctx context.Context) (uint64, error)
	// ReplicatedUntil tells that every flow the peers created before t has been imported here,
	// so that a flow without state here began after t: second chance need no longer cover the
	// table changes made before t (a mid-flow packet of such a flow belongs to the current table).
	ReplicatedUntil(ctx context.Context, t time.Time) error
}

// ImportResult counts what ImportFlows did with a batch.
type ImportResult struct {
	Imported int
	// Skipped counts the flows not taken in, by reason ("no such service", "no such backend",
	// "another nat source").
	Skipped map[string]int
}
