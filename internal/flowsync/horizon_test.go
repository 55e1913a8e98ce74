package flowsync

import (
	"context"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/testutil"
)

// TestHorizon: node a tells its datapath no horizon while its peer b's full resync is under way;
// once it completed, a horizon behind b's latest datagram by horizonMargin that moves on with b's
// heartbeats; b down holds it; b back (restarted) holds it until b's table arrived again.
func TestHorizon(t *testing.T) {
	port := testPort(t)
	// Heartbeats every 100 ms: a resync paused for less than three of them is not asked again.
	fast := Options{Heartbeat: 100 * time.Millisecond, InitialSyncTimeout: time.Hour}
	aOpts := fast
	aOpts.Peers = peers("127.0.0.10")
	a := start(t, "127.0.0.11", port, aOpts, nil)

	release := make(chan struct{})
	paused := &fakeDatapath{table: testFlows(2, false), pause: func(ctx context.Context) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
	bOpts := fast
	bOpts.Peers = peers("127.0.0.11")
	stopB := startPeer(t, "127.0.0.10", port, bOpts, paused)
	testutil.Eventually(t, "b's resync for a under way", func() bool {
		_, walking, _ := paused.walkStats()
		return walking == 1 && peerStatus(a.r, "127.0.0.10").Connected
	})
	time.Sleep(3 * horizonEvery) // several rounds of the horizon, none of which may tell
	if h := a.dp.horizon(); !h.IsZero() {
		t.Fatalf("a told its datapath a horizon (%s) before b's full resync completed", h)
	}
	close(release)
	testutil.Eventually(t, "a horizon once b's resync completed", func() bool { return !a.dp.horizon().IsZero() })
	first := a.dp.horizon()
	if seen := peerStatus(a.r, "127.0.0.10").LastSeen; first.After(seen.Add(-horizonMargin)) {
		t.Errorf("horizon %s is less than %s behind b's latest datagram (%s)", first, horizonMargin, seen)
	}
	if got := a.r.Status().ReplicatedUntil; !got.Equal(first) && got.Before(first) {
		t.Errorf("Status().ReplicatedUntil = %s, want at least %s", got, first)
	}
	testutil.Eventually(t, "the horizon moving on with b's heartbeats", func() bool { return a.dp.horizon().After(first) })

	stopB()
	testutil.Eventually(t, "b down at a", func() bool { return !peerStatus(a.r, "127.0.0.10").Connected })
	held := a.dp.horizon()
	if seen := peerStatus(a.r, "127.0.0.10").LastSeen; !held.Equal(seen.Add(-horizonMargin)) {
		t.Errorf("with b down the horizon is %s, want b's last datagram less %s (%s)", held, horizonMargin, seen.Add(-horizonMargin))
	}

	again := make(chan struct{})
	paused.pause = func(ctx context.Context) error {
		select {
		case <-again:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	startPeer(t, "127.0.0.10", port, bOpts, paused)
	testutil.Eventually(t, "b back, its resync for a under way", func() bool {
		_, walking, _ := paused.walkStats()
		return walking == 1 && peerStatus(a.r, "127.0.0.10").Connected
	})
	time.Sleep(3 * horizonEvery)
	if h := a.dp.horizon(); !h.Equal(held) {
		t.Errorf("b back without its resync moved the horizon from %s to %s", held, h)
	}
	close(again)
	testutil.Eventually(t, "the horizon moving once b's table arrived again", func() bool { return a.dp.horizon().After(held) })
}
