package engine

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sluicelb/sluice/internal/datapath"
)

// EventPacketsUnforwarded: the datapath could not forward packets of services (forwarding
// disabled, no route, no neighbour) and dropped them; at most one event per unforwardedEvery.
const EventPacketsUnforwarded = "packets_unforwarded"

// The datapath's counters of packets it could not forward are read every unforwardedPoll; what
// they grew by goes out in one event at most every unforwardedEvery, so that a black hole makes
// an event a minute rather than one per packet.
const (
	unforwardedPoll  = 5 * time.Second
	unforwardedEvery = time.Minute
)

// watchUnforwarded follows the datapath's counters of packets it could not forward until ctx ends.
func (e *Engine) watchUnforwarded(ctx context.Context) {
	r, ok := e.dp.(datapath.UnforwardedReader)
	if !ok {
		return
	}
	tick := time.NewTicker(unforwardedPoll)
	defer tick.Stop()
	var alarm unforwardedAlarm
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		counts, err := r.Unforwarded(ctx)
		if err != nil {
			e.log.Debug("reading the counters of packets not forwarded", "err", err)
			continue
		}
		if ev, ok := alarm.note(counts, time.Now()); ok {
			e.publish(ev)
		}
	}
}

// unforwardedAlarm remembers the counters last reported and when.
type unforwardedAlarm struct {
	reported map[string]datapath.Unforwarded // nil until the first reading, the baseline
	at       time.Time
}

// note takes a reading at now and returns the event it calls for, if any: what grew since the last
// event (or the first reading), once unforwardedEvery has passed since that event.
func (a *unforwardedAlarm) note(counts map[string]datapath.Unforwarded, now time.Time) (Event, bool) {
	if a.reported == nil {
		a.reported = counts
		return Event{}, false
	}
	if now.Sub(a.at) < unforwardedEvery {
		return Event{}, false
	}
	var grew []string
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		if d := since(counts[name], a.reported[name]); d.Total() > 0 {
			grew = append(grew, name+": "+d.String())
		}
	}
	if len(grew) == 0 {
		return Event{}, false
	}
	a.reported, a.at = counts, now
	return Event{Type: EventPacketsUnforwarded, Message: "packets the datapath could not forward and dropped: " + strings.Join(grew, "; ")}, true
}

// since is what u grew by from before; a counter that went down (its service was programmed anew)
// counts from zero.
func since(u, before datapath.Unforwarded) datapath.Unforwarded {
	grown := func(now, then uint64) uint64 {
		if now < then {
			return now
		}
		return now - then
	}
	return datapath.Unforwarded{
		ForwardingDisabled: grown(u.ForwardingDisabled, before.ForwardingDisabled),
		NoRoute:            grown(u.NoRoute, before.NoRoute),
		NoNeighbour:        grown(u.NoNeighbour, before.NoNeighbour),
	}
}
