package conntrackd

import (
	"testing"
	"time"
)

// syncRun feeds a bulkTracker the statistics of polls syncPollEvery apart for up to limit after
// the request: injected(i) entries injected in the i-th interval (from 1), the peers heard in
// each. It returns when the tracker said done (-1: never).
func syncRun(limit time.Duration, injected func(i int) uint64) time.Duration {
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	st := Stats{PacketsReceived: 7, InjectCreated: 100}
	b := newBulkTracker(t0, st)
	for i := 1; time.Duration(i)*syncPollEvery <= limit; i++ {
		n := injected(i)
		st.PacketsReceived += 1 + n/10
		st.InjectCreated += n / 2
		st.InjectDestroyed += n - n/2
		if b.observe(t0.Add(time.Duration(i)*syncPollEvery), st) {
			return time.Duration(i) * syncPollEvery
		}
	}
	return -1
}

// live is a peer's replication of its live flows: about rate entries per interval, jittered
// by ±25% the same way every run.
func live(rate uint64) func(i int) uint64 {
	return func(i int) uint64 { return rate*3/4 + uint64(i*7919%11)*rate/20 }
}

// interval is the poll interval a time falls in (from 1).
func interval(d time.Duration) int { return int(d / syncPollEvery) }

func TestBulkTrackerBulkThenLiveTraffic(t *testing.T) {
	// The measured case: the peer's table (40,000 entries) arrives within 2.1 s of the request
	// while it replicates 200 new flows a second.
	bulkEnd := 2250 * time.Millisecond
	got := syncRun(30*time.Second, func(i int) uint64 {
		n := live(50)(i)
		if i <= interval(bulkEnd) {
			n += 40000 / uint64(interval(bulkEnd))
		}
		return n
	})
	if got < 0 || got > bulkEnd+max(bulkQuiet, bulkEnd)+syncPollEvery {
		t.Fatalf("done at %v, want soon after the bulk ended at %v (not at a timeout)", got, bulkEnd)
	}
	if got < bulkEnd+bulkQuiet {
		t.Errorf("done at %v, before a quiet of %v after the bulk ended at %v", got, bulkQuiet, bulkEnd)
	}
}

func TestBulkTrackerNoBulkSteadyTraffic(t *testing.T) {
	// No burst above the live rate: only a quiet ends the initial sync, and there is none; the
	// caller's timeout does, as before.
	for _, rate := range []uint64{4, 50, 5000} {
		if got := syncRun(60*time.Second, live(rate)); got >= 0 {
			t.Errorf("live traffic of %d entries per poll alone: done at %v", rate, got)
		}
	}
}

func TestBulkTrackerSlowBulkNeverEarly(t *testing.T) {
	// A bulk at a steady pace, a few times the live rate, for 8 s: never done while it arrives.
	bulkEnd := 8 * time.Second
	got := syncRun(60*time.Second, func(i int) uint64 {
		n := live(50)(i)
		if i <= interval(bulkEnd) {
			n += 400
		}
		return n
	})
	if got >= 0 && got <= bulkEnd {
		t.Errorf("done at %v while the bulk arrived until %v", got, bulkEnd)
	}
}

func TestBulkTrackerSecondDumpAfterPause(t *testing.T) {
	// The peer's conntrackd sends its cache (the peer's own flows), then, once its supervisor
	// reloaded the kernel table (-R, a pause longer than bulkQuiet but shorter than the first
	// dump), the whole table (-B): the first dump's end is not taken for the end.
	const firstEnd, pauseEnd, secondEnd = 2500 * time.Millisecond, 4750 * time.Millisecond, 7750 * time.Millisecond
	got := syncRun(30*time.Second, func(i int) uint64 {
		n := live(50)(i)
		switch {
		case i <= interval(firstEnd):
			n += 2000
		case i > interval(pauseEnd) && i <= interval(secondEnd):
			n += 5000
		}
		return n
	})
	if got < 0 || got <= secondEnd {
		t.Errorf("done at %v, want after the second dump ended at %v", got, secondEnd)
	}
}

func TestBulkTrackerQuiet(t *testing.T) {
	// An empty peer and no traffic: the peers' messages keep coming, nothing is injected: done
	// after bulkQuiet, as before.
	if got := syncRun(10*time.Second, func(int) uint64 { return 0 }); got != bulkQuiet {
		t.Errorf("nothing to send: done at %v, want %v", got, bulkQuiet)
	}
	// A bulk and no live traffic: done bulkQuiet after its last entry.
	bulk := func(i int) uint64 {
		if i <= interval(time.Second) {
			return 5000
		}
		return 0
	}
	if got := syncRun(10*time.Second, bulk); got != time.Second+bulkQuiet {
		t.Errorf("bulk of 1 s then nothing: done at %v, want %v", got, time.Second+bulkQuiet)
	}
}

func TestBulkTrackerNeedsThePeers(t *testing.T) {
	// Nothing heard from a peer since the request: never done, however quiet.
	t0 := time.Now()
	st := Stats{PacketsReceived: 3}
	b := newBulkTracker(t0, st)
	for i := 1; i < 100; i++ {
		if b.observe(t0.Add(time.Duration(i)*syncPollEvery), st) {
			t.Fatalf("done at poll %d without a word from a peer", i)
		}
	}
	// A restarted conntrackd's counters start again from 0: not growth, not a burst.
	if b.observe(t0.Add(time.Hour), Stats{}) || b.peak != 0 {
		t.Errorf("counters going back: peak %v", b.peak)
	}
}

func TestPollInterval(t *testing.T) {
	s := &Supervisor{synced: make(chan struct{})}
	if got := s.pollInterval(&instance{started: time.Now()}); got != syncPollEvery {
		t.Errorf("just started: every %v, want %v", got, syncPollEvery)
	}
	// A peer down or never bursting is not polled for at that pace for ever.
	if got := s.pollInterval(&instance{started: time.Now().Add(-syncPollFor)}); got != pollEvery {
		t.Errorf("started %v ago: every %v, want %v", syncPollFor, got, pollEvery)
	}
	close(s.synced)
	if got := s.pollInterval(&instance{started: time.Now()}); got != pollEvery {
		t.Errorf("synced: every %v, want %v", got, pollEvery)
	}
}
