package conntrackd

import "time"

// Judging the end of the peers' bulk transfer after this node asked for their table.
const (
	// syncPollEvery is how often the statistics are read until the initial sync is done: the
	// rates bulkTracker compares are measured over it.
	syncPollEvery = 250 * time.Millisecond
	// syncPollFor is how long after conntrackd started the statistics are read that often:
	// longer than the initial sync's default timeout.
	syncPollFor = 30 * time.Second
	// bulkQuiet is the shortest quiet that ends an initial sync: no entry injected for that long
	// (the peers have nothing more to send), or the injection rate below the peak's
	// 1/bulkDropRatio for that long and for as long as the burst lasted.
	bulkQuiet = 2 * time.Second
	// bulkDropRatio is how far below the peak rate the rate must fall for the burst to be over:
	// the peers' live replication goes on meanwhile, at a rate a bulk transfer dwarfs.
	bulkDropRatio = 4
)

// bulkTracker follows the entries injected into this node's kernel table after it asked the
// peers for their table (conntrackd -n), and tells when the peers' answer is in. A peer answers
// with its table in a burst, while it keeps replicating its live flows: the burst is over once
// the injection rate has stayed below 1/bulkDropRatio of its peak for bulkQuiet and for at least
// as long as the burst lasted (a peer sends its table twice, conntrackd's cache and then its
// kernel table: the pause between the two is shorter than the first). Without a burst well above
// the live rate, only a quiet of bulkQuiet ends it, else the caller's timeout does.
type bulkTracker struct {
	// asked is when the table was asked for; recv the packets received from the peers then.
	asked time.Time
	recv  uint64
	// last is the previous sample; changed when the injected entries last grew.
	last    syncSample
	changed time.Time
	// peak is the highest rate (entries/s) of an interval since the request; high the end of
	// the last interval whose rate was above peak/bulkDropRatio.
	peak float64
	high time.Time
}

// syncSample is the injected entries at a time.
type syncSample struct {
	at       time.Time
	injected uint64
}

// newBulkTracker starts following from the statistics read when the table was asked for.
func newBulkTracker(at time.Time, st Stats) *bulkTracker {
	s := syncSample{at: at, injected: st.Injected()}
	return &bulkTracker{asked: at, recv: st.PacketsReceived, last: s, changed: at, high: at}
}

// observe takes the statistics read at a time and tells whether the peers' table is in.
func (b *bulkTracker) observe(at time.Time, st Stats) bool {
	cur := syncSample{at: at, injected: st.Injected()}
	dt := cur.at.Sub(b.last.at)
	if dt <= 0 {
		return false
	}
	grown := uint64(0)
	if cur.injected > b.last.injected { // a smaller count is a restarted conntrackd: no growth
		grown = cur.injected - b.last.injected
		b.changed = at
	}
	b.last = cur
	rate := float64(grown) / dt.Seconds()
	if rate > b.peak {
		b.peak = rate
	}
	if rate > 0 && rate*bulkDropRatio > b.peak {
		b.high = at
	}
	if st.PacketsReceived <= b.recv { // no peer heard since the request
		return false
	}
	if at.Sub(b.changed) >= bulkQuiet {
		return true
	}
	burst, quiet := b.high.Sub(b.asked), at.Sub(b.high)
	return b.peak > 0 && burst > 0 && quiet >= max(bulkQuiet, burst)
}
