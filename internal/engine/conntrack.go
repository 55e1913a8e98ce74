package engine

import (
	"context"
	"fmt"
	"time"
)

// conntrackReader is a datapath that reads how full its network namespace's conntrack table is.
type conntrackReader interface {
	Conntrack(ctx context.Context) (count, max uint64, err error)
}

// The conntrack table's fill is read every conntrackPoll. A warning goes out when it passes
// conntrackHigh of the maximum, and the all-clear when it falls back under conntrackLow: between
// the two no event repeats, however the fill wavers.
const (
	conntrackPoll = 5 * time.Second
	conntrackHigh = 0.8
	conntrackLow  = 0.7
)

// watchConntrack follows the fill of the datapath's conntrack table until ctx ends.
func (e *Engine) watchConntrack(ctx context.Context) {
	r, ok := e.dp.(conntrackReader)
	if !ok {
		return
	}
	tick := time.NewTicker(conntrackPoll)
	defer tick.Stop()
	var alarm conntrackAlarm
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		count, max, err := r.Conntrack(ctx)
		if err != nil {
			e.log.Debug("reading the conntrack fill", "err", err)
			continue
		}
		if ev, ok := alarm.note(count, max); ok {
			e.publish(ev)
		}
	}
}

// conntrackAlarm remembers whether the table was last reported nearly full.
type conntrackAlarm struct{ high bool }

// note takes a reading and returns the event it calls for, if any.
func (a *conntrackAlarm) note(count, max uint64) (Event, bool) {
	if max == 0 {
		return Event{}, false
	}
	fill := float64(count) / float64(max)
	switch {
	case !a.high && fill >= conntrackHigh:
		a.high = true
		return Event{Type: EventConntrackHigh, Message: fmt.Sprintf(
			"conntrack table %.0f%% full: %d of %d entries; new flows are dropped once it is full (nf_conntrack_max, docs/operations.md)",
			100*fill, count, max)}, true
	case a.high && fill < conntrackLow:
		a.high = false
		return Event{Type: EventConntrackNormal, Message: fmt.Sprintf(
			"conntrack table back under %.0f%%: %d of %d entries", 100*conntrackLow, count, max)}, true
	}
	return Event{}, false
}
