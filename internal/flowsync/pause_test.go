package flowsync

import (
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/testutil"
)

// A paused Replicator goes silent; once resumed (a new node id), each side asks the other for
// the flows it saw a packet of since the pause, and takes none idle since before it: a, whose
// table missed b's changes, and b, which missed a's.
func TestPauseResume(t *testing.T) {
	port := testPort(t)
	opts := Options{InitialSyncTimeout: time.Hour, ResyncOnce: true, NoRefresh: true, Heartbeat: 20 * time.Millisecond}
	flows := testFlows(24, false)
	aOpts, bOpts := opts, opts
	aOpts.Peers, bOpts.Peers = peers("127.0.0.9"), peers("127.0.0.8")
	a := start(t, "127.0.0.8", port, aOpts, flows[:4])
	b := start(t, "127.0.0.9", port, bOpts, flows[4:8])
	for _, n := range []*node{a, b} {
		testutil.Eventually(t, "the initial syncs", func() bool { return synced(n.r) })
	}
	testutil.Eventually(t, "each taking the other's table", func() bool { return a.dp.has(flows[4:8]) && b.dp.has(flows[:4]) })
	id := a.r.Status().NodeID

	a.r.Pause(time.Now())
	a.r.Pause(time.Now().Add(time.Hour)) // paused already: keeps its first time
	testutil.Eventually(t, "b no longer hearing a", func() bool { return !peerStatus(b.r, "127.0.0.8").Connected })
	// Meanwhile each served two flows (a packet just now) and holds two idle for an hour.
	aServed, aIdle, bServed, bIdle := flows[8:10], flows[10:12], flows[12:14], flows[14:16]
	for i := range 2 {
		aServed[i].Idle, bServed[i].Idle = 0, 0
		aIdle[i].Idle, bIdle[i].Idle = time.Hour, time.Hour
	}
	a.dp.setTable(flows[8:12])
	b.dp.setTable(flows[12:16])
	must(t, a.r.Resume())

	testutil.Eventually(t, "a taking what b served during the pause, b what a served", func() bool {
		return a.dp.has(bServed) && b.dp.has(aServed) &&
			peerStatus(a.r, "127.0.0.9").Skipped[skipBeforeLapse] == 2 && peerStatus(b.r, "127.0.0.8").Skipped[skipBeforeLapse] == 2
	})
	if n := a.dp.count(bIdle) + b.dp.count(aIdle); n != 0 {
		t.Errorf("%d flows idle since before the pause taken in", n)
	}
	if st := a.r.Status(); st.NodeID == id || !st.PausedSince.IsZero() {
		t.Errorf("resumed: node id %016x (was %016x), paused since %s; want a new id, no pause", st.NodeID, id, st.PausedSince)
	}
	must(t, a.r.Resume()) // not paused: nothing
}

// A node paused before its initial sync is done asks its peer, when it resumes, for the whole
// table: a resync since the pause would never end the initial sync.
func TestResumeBeforeInitialSync(t *testing.T) {
	port := testPort(t)
	opts := Options{InitialSyncTimeout: time.Hour, ResyncOnce: true, NoRefresh: true, Heartbeat: 20 * time.Millisecond}
	flows := testFlows(4, false)
	for i := range flows {
		flows[i].Idle = time.Hour
	}
	aOpts, bOpts := opts, opts
	aOpts.Peers, bOpts.Peers = peers("127.0.0.9"), peers("127.0.0.8")
	a := start(t, "127.0.0.8", port, aOpts, nil)
	a.r.Pause(time.Now())
	must(t, a.r.Resume())
	start(t, "127.0.0.9", port, bOpts, flows)
	testutil.Eventually(t, "a's initial sync from b, its whole table", func() bool { return synced(a.r) && a.dp.has(flows) })
	if st := a.r.Status(); st.InitialSync.WithoutPeer || st.InitialSync.Peer.String() != "127.0.0.9" {
		t.Errorf("a's initial sync %+v, want from b", st.InitialSync)
	}
}
