package flowsync

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/testutil"
)

// startPeer runs a Replicator at 127.0.0.x over dp until stop is called (or the test ends).
func startPeer(t *testing.T, addr string, port int, opts Options, dp *fakeDatapath) (stop func()) {
	t.Helper()
	opts.Address, opts.Port, opts.Secret = netip.MustParseAddr(addr), port, testSecret
	r, err := New(opts, dp, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(stop)
	return stop
}

// TestRejoinWaitsForAResync: node a loses its only peer (b stops), serving nothing meanwhile;
// when b comes back (with the flows it made meanwhile), a waits for b's full resync before it
// counts as ready again, and then holds b's flows. Had a served new flows while alone, it goes
// on without waiting.
func TestRejoinWaitsForAResync(t *testing.T) {
	for _, served := range []bool{false, true} {
		name := map[bool]string{false: "idle alone", true: "served alone"}[served]
		t.Run(name, func(t *testing.T) {
			port := testPort(t)
			fast := Options{Heartbeat: 20 * time.Millisecond, InitialSyncTimeout: time.Hour, ResyncRate: 32 << 10}
			aOpts := fast
			aOpts.Peers = peers("127.0.0.9")
			a := start(t, "127.0.0.8", port, aOpts, nil)
			bOpts := fast
			bOpts.Peers = peers("127.0.0.8")
			stopB := startPeer(t, "127.0.0.9", port, bOpts, &fakeDatapath{})
			testutil.Eventually(t, "a's initial sync", func() bool { return synced(a.r) })
			stopB()
			testutil.Eventually(t, "b down at a", func() bool { return !peerStatus(a.r, "127.0.0.9").Connected })
			testutil.Eventually(t, "a alone", func() bool {
				a.r.mu.Lock()
				defer a.r.mu.Unlock()
				return !a.r.alone.since.IsZero()
			})
			if served {
				a.dp.emit(testFlows(3, false)) // made while alone: a was serving
			}

			// b comes back with the flows it made while a was away: 1,000 records take about a
			// second at 32 KiB/s, long enough to see a waiting.
			made := testFlows(1000, true)
			startPeer(t, "127.0.0.9", port, bOpts, &fakeDatapath{table: made})
			if served {
				testutil.Eventually(t, "b back at a", func() bool { return peerStatus(a.r, "127.0.0.9").Connected })
				if j := a.r.Rejoining(); j.Pending {
					t.Fatalf("a served new flows while alone and still waits: %+v", j)
				}
				return
			}
			testutil.Eventually(t, "a waiting for a resync", func() bool { return a.r.Rejoining().Pending })
			if j := a.r.Rejoining(); j.Peer != netip.MustParseAddr("127.0.0.9") || j.Since.IsZero() {
				t.Errorf("rejoin %+v, want through 127.0.0.9", j)
			}
			testutil.Eventually(t, "a rejoined", func() bool { return !a.r.Rejoining().Pending })
			if !a.dp.has(made) {
				t.Errorf("a rejoined holding %d of b's %d flows", a.dp.importedCount(), len(made))
			}
		})
	}
}

// TestRejoinTimesOut: a peer that comes back but never completes a resync holds a rejoining node
// back for InitialSyncTimeout at most.
func TestRejoinTimesOut(t *testing.T) {
	r := &Replicator{opts: Options{InitialSyncTimeout: time.Second}, peers: map[netip.Addr]*peer{}}
	p := newPeer(netip.MustParseAddr("127.0.0.10"))
	r.peers[p.addr] = p
	r.initial.Done = true
	now := time.Now()
	r.noteAlone(now)
	if r.alone.since.IsZero() {
		t.Fatal("every peer down and not alone")
	}
	if evs := r.noteBack(p, now.Add(time.Minute)); len(evs) != 1 || !r.alone.rejoin.Pending {
		t.Fatalf("back: %v, rejoin %+v; want pending", evs, r.alone.rejoin)
	}
	if evs := r.rejoinExpired(now.Add(time.Minute + time.Second/2)); len(evs) != 0 || !r.alone.rejoin.Pending {
		t.Fatalf("expired early: %v", evs)
	}
	if evs := r.rejoinExpired(now.Add(time.Minute + time.Second)); len(evs) != 1 || r.alone.rejoin.Pending {
		t.Fatalf("not expired after the timeout: %v, %+v", evs, r.alone.rejoin)
	}
}
