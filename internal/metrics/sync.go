package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicelb/sluice/internal/replication"
)

// The replication of flows between balancer nodes (the sync section; `sluice sync`).
var (
	syncEnabled = prometheus.NewDesc("sluice_sync_enabled", "Whether the config has a sync section (1) or not (0).", nil, nil)
	syncReady   = prometheus.NewDesc("sluice_sync_ready",
		"Whether the node has the flows' state it needs to take traffic (1): the initial sync from a peer completed, or its timeout passed.", nil, nil)
	conntrackdUp       = prometheus.NewDesc("sluice_sync_conntrackd_up", "Whether conntrackd runs (1) or not (0).", nil, nil)
	conntrackdRestarts = prometheus.NewDesc("sluice_sync_conntrackd_restarts_total",
		"conntrackd processes started after the first.", nil, nil)
	conntrackdPackets = prometheus.NewDesc("sluice_sync_conntrackd_packets_total",
		"Packets conntrackd sent or received on the sync link.", []string{"direction"}, nil)
	conntrackdErrors = prometheus.NewDesc("sluice_sync_conntrackd_errors_total",
		"conntrackd's errors on the sync link: send, receive, malformed, lost.", []string{"kind"}, nil)
	conntrackdInjected = prometheus.NewDesc("sluice_sync_conntrackd_injected_total",
		"Entries conntrackd wrote into the kernel's conntrack table from its peers.", nil, nil)
	conntrackdCached = prometheus.NewDesc("sluice_sync_conntrackd_cached_entries",
		"Flows in conntrackd's cache: above the kernel's table, it holds flows that ended (no Sluice node asks for it: the conntrack table resync sends the live table).", nil, nil)
	tableDrops = prometheus.NewDesc("sluice_sync_conntrack_resync_dropped_datagrams_total",
		"Datagrams to the conntrack table resync's port received and dropped, by reason.", []string{"reason"}, nil)
	tablePeerEntries = prometheus.NewDesc("sluice_sync_conntrack_resync_peer_entries_total",
		"Conntrack entries sent to or received from the peer in full resyncs.", []string{"peer", "direction"}, nil)
	tablePeerSkipped = prometheus.NewDesc("sluice_sync_conntrack_resync_peer_skipped_total",
		"Conntrack entries from the peer's full resync not written, by reason.", []string{"peer", "reason"}, nil)
	tablePeerResync = prometheus.NewDesc("sluice_sync_conntrack_resync_peer_last_resync_timestamp_seconds",
		"When the last full resync of the conntrack table from the peer ended (0: none).", []string{"peer"}, nil)
	conntrackdCPU = prometheus.NewDesc("sluice_sync_conntrackd_cpu_seconds_total",
		"CPU time (user and system) of the conntrackd processes the daemon ran: what replication costs the node in user space.", nil, nil)
	conntrackdForeign = prometheus.NewDesc("sluice_sync_conntrackd_foreign_dropped_total",
		"Packets to conntrackd's port from an address that is not a peer, dropped.", nil, nil)
	syncQueue      = prometheus.NewDesc("sluice_sync_queue_flows", "Flows waiting to be sent to the peers.", nil, nil)
	syncQueueDrops = prometheus.NewDesc("sluice_sync_queue_dropped_total", "Flows not sent because the queue was full.", nil, nil)
	syncLostEvents = prometheus.NewDesc("sluice_sync_flow_events_lost_total",
		"Flows created or closed that the datapath could not report to the replication (its ring was full).", nil, nil)
	syncSendErrors  = prometheus.NewDesc("sluice_sync_send_errors_total", "Datagrams the kernel refused to send.", nil, nil)
	syncDrops       = prometheus.NewDesc("sluice_sync_dropped_datagrams_total", "Datagrams received and dropped, by reason.", []string{"reason"}, nil)
	syncPeerUp      = prometheus.NewDesc("sluice_sync_peer_connected", "Whether the peer was heard within three heartbeats (1).", []string{"peer"}, nil)
	syncPeerEntries = prometheus.NewDesc("sluice_sync_peer_entries_total",
		"Flow records sent to or received from the peer, in updates and resyncs.", []string{"peer", "direction"}, nil)
	syncPeerSkipped = prometheus.NewDesc("sluice_sync_peer_skipped_total",
		"Flows from the peer the datapath did not take, by reason.", []string{"peer", "reason"}, nil)
	syncPeerLag    = prometheus.NewDesc("sluice_sync_peer_lag_seconds", "Arrival time of the peer's latest datagram minus its clock.", []string{"peer"}, nil)
	syncPeerResync = prometheus.NewDesc("sluice_sync_peer_last_resync_timestamp_seconds",
		"When the last full resync from the peer ended (0: none yet).", []string{"peer"}, nil)
	syncReplicatedUntil = prometheus.NewDesc("sluice_sync_replicated_until_timestamp_seconds",
		"Every flow the peers made before this time is here, so second chance covers only the table changes since (0: not known yet).", nil, nil)
)

// syncCollector reads the replication's state at scrape time.
type syncCollector struct {
	src interface{ Sync() replication.Status }
}

// Describe sends every metric the collector can emit.
func (c syncCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{syncEnabled, syncReady, conntrackdUp, conntrackdRestarts, conntrackdPackets,
		conntrackdErrors, conntrackdInjected, conntrackdCached, conntrackdForeign, conntrackdCPU, syncQueue, syncQueueDrops, syncLostEvents, syncSendErrors, syncDrops,
		syncPeerUp, syncPeerEntries, syncPeerSkipped, syncPeerLag, syncPeerResync, syncReplicatedUntil,
		tableDrops, tablePeerEntries, tablePeerSkipped, tablePeerResync} {
		ch <- d
	}
}

// Collect reads the engine's replication status.
func (c syncCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Sync()
	ch <- gauge(syncEnabled, boolValue(s.Enabled))
	if !s.Enabled {
		return
	}
	ch <- gauge(syncReady, boolValue(s.Ready))
	if ct := s.Conntrackd; ct != nil {
		ch <- gauge(conntrackdUp, boolValue(ct.Running))
		ch <- counter(conntrackdRestarts, float64(ct.Restarts))
		ch <- counter(conntrackdPackets, float64(ct.Stats.PacketsSent), "sent")
		ch <- counter(conntrackdPackets, float64(ct.Stats.PacketsReceived), "received")
		for kind, n := range map[string]uint64{"send": ct.Stats.SendErrors, "receive": ct.Stats.ReceiveErrors,
			"malformed": ct.Stats.MalformedMessages, "lost": ct.Stats.LostMessages} {
			ch <- counter(conntrackdErrors, float64(n), kind)
		}
		ch <- counter(conntrackdInjected, float64(ct.Stats.Injected()))
		ch <- gauge(conntrackdCached, float64(ct.Stats.Entries))
		ch <- counter(conntrackdForeign, float64(ct.ForeignDrops))
		ch <- counter(conntrackdCPU, ct.CPUSeconds)
	}
	if t := s.ConntrackResync; t != nil {
		for reason, n := range t.Drops {
			ch <- counter(tableDrops, float64(n), reason)
		}
		for _, p := range t.Peers {
			ch <- counter(tablePeerEntries, float64(p.SentEntries), p.Address, "sent")
			ch <- counter(tablePeerEntries, float64(p.ReceivedEntries), p.Address, "received")
			for reason, n := range p.Skipped {
				ch <- counter(tablePeerSkipped, float64(n), p.Address, reason)
			}
			ch <- gauge(tablePeerResync, unixSeconds(p.LastResync.At), p.Address)
		}
	}
	f := s.Flows
	if f == nil {
		return
	}
	ch <- gauge(syncQueue, float64(f.QueueLength))
	ch <- counter(syncQueueDrops, float64(f.QueueDrops))
	ch <- counter(syncLostEvents, float64(f.LostEvents))
	ch <- counter(syncSendErrors, float64(f.SendErrors))
	ch <- gauge(syncReplicatedUntil, unixSeconds(f.ReplicatedUntil))
	for reason, n := range f.Drops {
		ch <- counter(syncDrops, float64(n), reason)
	}
	for _, p := range f.Peers {
		ch <- gauge(syncPeerUp, boolValue(p.Connected), p.Address)
		ch <- counter(syncPeerEntries, float64(p.SentEntries), p.Address, "sent")
		ch <- counter(syncPeerEntries, float64(p.ReceivedEntries), p.Address, "received")
		for reason, n := range p.Skipped {
			ch <- counter(syncPeerSkipped, float64(n), p.Address, reason)
		}
		ch <- gauge(syncPeerLag, p.LagNS.Seconds(), p.Address)
		ch <- gauge(syncPeerResync, unixSeconds(p.LastResync.At), p.Address)
	}
}

func counter(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
}
