package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/conntrackd"
	"github.com/sluicelb/sluice/internal/replication"
)

func TestPrintSync(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	var out strings.Builder
	if err := printSync(&out, replication.Status{}, now); err != nil || out.String() != "sync: off (the config has no sync section)\n" {
		t.Fatalf("off: %q, %v", out.String(), err)
	}
	st := replication.Status{Enabled: true, Ready: false, Why: "waiting for the initial sync of the flow tables from a peer (at most 10s)",
		Conntrackd: &conntrackd.Status{Running: false, Reason: "exited with status 1; restarting in 2s", Restarts: 3, ForeignDrops: 7, CPUSeconds: 12.34},
		Flows: &replication.FlowStatus{NodeID: "00000000000000ab", QueueLimit: 65536, QueueDrops: 2, Drops: map[string]uint64{"bad_mac": 4, "replay": 0},
			ReplicatedUntil: now.Add(-270 * time.Millisecond),
			Peers: []replication.PeerStatus{{Address: "10.91.4.12", Connected: true, LastSeen: now.Add(-time.Second), SentEntries: 10, ReceivedEntries: 20,
				LastResync: replication.Resync{At: now.Add(-time.Minute), Entries: 1800, DurationNS: 250 * time.Millisecond}, Skipped: map[string]uint64{"no such backend": 1}}}}}
	st.ConntrackResync = &replication.FlowStatus{NodeID: "00000000000000cd", Drops: map[string]uint64{"unknown_peer": 1},
		Peers: []replication.PeerStatus{{Address: "10.91.4.12", Connected: true, ReceivedEntries: 420, Skipped: map[string]uint64{"tracked here": 9},
			LastResync: replication.Resync{At: now.Add(-2 * time.Minute), Entries: 420, DurationNS: 80 * time.Millisecond}}}}
	st.ConntrackResync.InitialSync.Done, st.ConntrackResync.InitialSync.Peer, st.ConntrackResync.InitialSync.At = true, "10.91.4.12", now.Add(-2*time.Minute)
	out.Reset()
	if err := printSync(&out, st, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"sync: NOT READY: waiting for the initial sync",
		"conntrackd: NOT RUNNING: exited with status 1; restarting in 2s; 3 restarts",
		"7 foreign packets dropped; 12.3s of CPU\n",
		"queue 0 of 65536, 2 dropped; 0 events lost",
		"dropped datagrams: bad_mac 4; 0 refreshes, 0 skipped, 0 failed; peers' flows all here until 270ms ago\n",
		"10.91.4.12  yes",
		"1m0s ago, 1800 entries in 250ms",
		"no such backend 1",
		"conntrack table resync: node 00000000000000cd; initial sync done from 10.91.4.12 2m0s ago; 0 send errors; dropped datagrams: unknown_peer 1\n",
		"2m0s ago, 420 entries in 80ms",
		"tracked here 9",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("sync listing lacks %q:\n%s", want, out.String())
		}
	}
	st.ConntrackResync.PausedSince = now.Add(-3 * time.Second)
	out.Reset()
	if err := printSync(&out, st, now); err != nil {
		t.Fatal(err)
	}
	if want := "initial sync done from 10.91.4.12 2m0s ago; paused 3s ago (conntrackd down: its peers do not hear this node); 0 send errors"; !strings.Contains(out.String(), want) {
		t.Errorf("paused sync listing lacks %q:\n%s", want, out.String())
	}
}

func TestDaemonSections(t *testing.T) {
	for _, c := range []struct {
		cfg  config.Config
		want string
	}{
		{config.Config{}, ""},
		{config.Config{BGP: &config.BGP{}}, "bgp"},
		{config.Config{BGP: &config.BGP{}, Sync: &config.Sync{}}, "bgp sync"},
	} {
		if got := strings.Join(daemonSections(&c.cfg), " "); got != c.want {
			t.Errorf("daemonSections = %q, want %q", got, c.want)
		}
	}
}
