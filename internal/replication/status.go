package replication

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sluicelb/sluice/internal/flowsync"
)

// FlowStatus is the ebpf flow tables' replication as the API shows it (flowsync.Status).
type FlowStatus struct {
	NodeID      string `json:"node_id"`
	InitialSync struct {
		Done        bool      `json:"done"`
		WithoutPeer bool      `json:"without_peer,omitempty"`
		Peer        string    `json:"peer,omitempty"`
		At          time.Time `json:"at,omitzero"`
	} `json:"initial_sync"`
	// PausedSince: the table has taken in and sent no live change since then (conntrackd is
	// down), and its peers do not hear this node; zero: not paused.
	PausedSince    time.Time         `json:"paused_since,omitzero"`
	QueueLength    int               `json:"queue_length"`
	QueueLimit     int               `json:"queue_limit"`
	QueueDrops     uint64            `json:"queue_drops"`
	OldestQueuedNS time.Duration     `json:"oldest_queued_ns"`
	Unencodable    uint64            `json:"unencodable"`
	SendErrors     uint64            `json:"send_errors"`
	Drops          map[string]uint64 `json:"drops"`
	// Refreshes counts the periodic resends of the whole table to the peers (which keep the
	// replicated flows' idle time fresh there); RefreshesSkipped those skipped because the one
	// before still ran; RefreshErrors those the datapath could not list.
	// LostEvents counts the flows created or closed that the datapath could not report to the
	// replication (its buffer was full); the peers learn them at the next refresh.
	LostEvents       uint64 `json:"lost_events"`
	Refreshes        uint64 `json:"refreshes"`
	RefreshesSkipped uint64 `json:"refreshes_skipped"`
	RefreshErrors    uint64 `json:"refresh_errors"`
	// ReplicatedUntil: every flow the peers made before it is here, so second chance covers only
	// the table changes since (zero: not known yet, or a peer has not resent its table since it
	// came up).
	ReplicatedUntil time.Time    `json:"replicated_until,omitzero"`
	Peers           []PeerStatus `json:"peers"`
}

// PeerStatus is what this node knows of a peer (flowsync.PeerStatus).
type PeerStatus struct {
	Address         string            `json:"address"`
	NodeID          string            `json:"node_id,omitempty"`
	Connected       bool              `json:"connected"`
	LastSeen        time.Time         `json:"last_seen,omitzero"`
	SentEntries     uint64            `json:"sent_entries"`
	ReceivedEntries uint64            `json:"received_entries"`
	SendErrors      uint64            `json:"send_errors"`
	ImportErrors    uint64            `json:"import_errors"`
	Skipped         map[string]uint64 `json:"skipped,omitempty"`
	Drops           map[string]uint64 `json:"drops,omitempty"`
	LagNS           time.Duration     `json:"lag_ns"`
	LastResync      Resync            `json:"last_resync"`
	LastServed      Resync            `json:"last_served"`
	LastRefresh     Resync            `json:"last_refresh"`
}

// Resync is a full resync that ended (flowsync.Resync).
type Resync struct {
	At         time.Time     `json:"at,omitzero"`
	Entries    uint64        `json:"entries"`
	Total      uint64        `json:"total"`
	DurationNS time.Duration `json:"duration_ns"`
}

func flowStatus(s flowsync.Status) FlowStatus {
	out := FlowStatus{
		NodeID: nodeID(s.NodeID), QueueLength: s.QueueLength, QueueLimit: s.QueueLimit, QueueDrops: s.QueueDrops,
		OldestQueuedNS: s.OldestQueued, Unencodable: s.Unencodable, SendErrors: s.SendErrors, Drops: dropMap(s.Drops),
		Refreshes: s.Refreshes, RefreshesSkipped: s.RefreshesSkipped, RefreshErrors: s.RefreshErrors,
		ReplicatedUntil: s.ReplicatedUntil, PausedSince: s.PausedSince, Peers: make([]PeerStatus, 0, len(s.Peers)),
	}
	out.InitialSync.Done, out.InitialSync.WithoutPeer, out.InitialSync.At = s.InitialSync.Done, s.InitialSync.WithoutPeer, s.InitialSync.At
	if s.InitialSync.Peer.IsValid() {
		out.InitialSync.Peer = s.InitialSync.Peer.String()
	}
	for _, p := range s.Peers {
		ps := PeerStatus{
			Address: p.Address.String(), Connected: p.Connected, LastSeen: p.LastSeen, SentEntries: p.SentEntries,
			ReceivedEntries: p.ReceivedEntries, SendErrors: p.SendErrors, ImportErrors: p.ImportErrors,
			Skipped: maps.Clone(p.Skipped), Drops: dropMap(p.Drops), LagNS: p.Lag,
			LastResync: resync(p.LastResync), LastServed: resync(p.LastServed),
			LastRefresh: Resync{At: p.LastRefresh.At, Entries: p.LastRefresh.Entries, Total: p.LastRefresh.Entries, DurationNS: p.LastRefresh.Duration},
		}
		if p.NodeID != 0 {
			ps.NodeID = nodeID(p.NodeID)
		}
		out.Peers = append(out.Peers, ps)
	}
	slices.SortFunc(out.Peers, func(a, b PeerStatus) int { return strings.Compare(a.Address, b.Address) })
	return out
}

func resync(r flowsync.Resync) Resync {
	return Resync{At: r.At, Entries: r.Entries, Total: r.Total, DurationNS: r.Duration}
}

func dropMap(m map[flowsync.DropReason]uint64) map[string]uint64 {
	out := make(map[string]uint64, len(m))
	for k, v := range m {
		out[string(k)] = v
	}
	return out
}

func nodeID(id uint64) string { return fmt.Sprintf("%016x", id) }
