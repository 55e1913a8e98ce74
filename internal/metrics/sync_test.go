package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicelb/sluice/internal/conntrackd"
	"github.com/sluicelb/sluice/internal/replication"
)

// syncSource answers a fixed replication status.
type syncSource replication.Status

func (s syncSource) Sync() replication.Status { return replication.Status(s) }

// TestSyncMetrics: the flow replication's queue, drops, horizon and peers are exported,
// conntrackd's cache and injections, and only the enabled gauge without a sync section.
func TestSyncMetrics(t *testing.T) {
	st := syncSource{Enabled: true, Ready: true, Flows: &replication.FlowStatus{
		QueueLength: 3, QueueDrops: 2, Drops: map[string]uint64{"bad_mac": 4},
		ReplicatedUntil: time.Unix(1700000000, 0),
		Peers: []replication.PeerStatus{{Address: "10.91.4.12", Connected: true, SentEntries: 10, ReceivedEntries: 20,
			LastResync: replication.Resync{At: time.Unix(1690000000, 0)}}},
	}}
	want := `
# HELP sluice_sync_dropped_datagrams_total Datagrams received and dropped, by reason.
# TYPE sluice_sync_dropped_datagrams_total counter
sluice_sync_dropped_datagrams_total{reason="bad_mac"} 4
# HELP sluice_sync_peer_entries_total Flow records sent to or received from the peer, in updates and resyncs.
# TYPE sluice_sync_peer_entries_total counter
sluice_sync_peer_entries_total{direction="received",peer="10.91.4.12"} 20
sluice_sync_peer_entries_total{direction="sent",peer="10.91.4.12"} 10
# HELP sluice_sync_peer_last_resync_timestamp_seconds When the last full resync from the peer ended (0: none yet).
# TYPE sluice_sync_peer_last_resync_timestamp_seconds gauge
sluice_sync_peer_last_resync_timestamp_seconds{peer="10.91.4.12"} 1.69e+09
# HELP sluice_sync_queue_flows Flows waiting to be sent to the peers.
# TYPE sluice_sync_queue_flows gauge
sluice_sync_queue_flows 3
# HELP sluice_sync_replicated_until_timestamp_seconds Every flow the peers made before this time is here, so second chance covers only the table changes since (0: not known yet).
# TYPE sluice_sync_replicated_until_timestamp_seconds gauge
sluice_sync_replicated_until_timestamp_seconds 1.7e+09
`
	if err := testutil.CollectAndCompare(syncCollector{src: st}, strings.NewReader(want),
		"sluice_sync_dropped_datagrams_total", "sluice_sync_peer_entries_total", "sluice_sync_peer_last_resync_timestamp_seconds",
		"sluice_sync_queue_flows", "sluice_sync_replicated_until_timestamp_seconds"); err != nil {
		t.Error(err)
	}
	off := `
# HELP sluice_sync_enabled Whether the config has a sync section (1) or not (0).
# TYPE sluice_sync_enabled gauge
sluice_sync_enabled 0
`
	ct := syncSource{Enabled: true, Conntrackd: &conntrackd.Status{Running: true, Stats: conntrackd.Stats{Entries: 1200, InjectCreated: 7}},
		ConntrackResync: &replication.FlowStatus{Drops: map[string]uint64{"unknown_peer": 2},
			Peers: []replication.PeerStatus{{Address: "10.91.4.12", ReceivedEntries: 300, Skipped: map[string]uint64{"tracked here": 12}}}}}
	conntrackdWant := `
# HELP sluice_sync_conntrack_resync_dropped_datagrams_total Datagrams to the conntrack table resync's port received and dropped, by reason.
# TYPE sluice_sync_conntrack_resync_dropped_datagrams_total counter
sluice_sync_conntrack_resync_dropped_datagrams_total{reason="unknown_peer"} 2
# HELP sluice_sync_conntrack_resync_peer_entries_total Conntrack entries sent to or received from the peer in full resyncs.
# TYPE sluice_sync_conntrack_resync_peer_entries_total counter
sluice_sync_conntrack_resync_peer_entries_total{direction="received",peer="10.91.4.12"} 300
sluice_sync_conntrack_resync_peer_entries_total{direction="sent",peer="10.91.4.12"} 0
# HELP sluice_sync_conntrack_resync_peer_skipped_total Conntrack entries from the peer's full resync not written, by reason.
# TYPE sluice_sync_conntrack_resync_peer_skipped_total counter
sluice_sync_conntrack_resync_peer_skipped_total{peer="10.91.4.12",reason="tracked here"} 12
# HELP sluice_sync_conntrackd_cached_entries Flows in conntrackd's cache: above the kernel's table, it holds flows that ended (no Sluice node asks for it: the conntrack table resync sends the live table).
# TYPE sluice_sync_conntrackd_cached_entries gauge
sluice_sync_conntrackd_cached_entries 1200
# HELP sluice_sync_conntrackd_injected_total Entries conntrackd wrote into the kernel's conntrack table from its peers.
# TYPE sluice_sync_conntrackd_injected_total counter
sluice_sync_conntrackd_injected_total 7
`
	if err := testutil.CollectAndCompare(syncCollector{src: ct}, strings.NewReader(conntrackdWant),
		"sluice_sync_conntrackd_cached_entries", "sluice_sync_conntrackd_injected_total", "sluice_sync_conntrack_resync_dropped_datagrams_total",
		"sluice_sync_conntrack_resync_peer_entries_total", "sluice_sync_conntrack_resync_peer_skipped_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(syncCollector{src: syncSource{}}); n != 1 {
		t.Errorf("without a sync section the collector sent %d metrics, want 1", n)
	}
	if err := testutil.CollectAndCompare(syncCollector{src: syncSource{}}, strings.NewReader(off)); err != nil {
		t.Error(err)
	}
}
