package ebpf

import (
	"time"
)

// The program counts the flows it opens to a backend and those whose client closes them (FIN,
// RST) or that it rebalances, for the services that pick by connections (lc, wlc) or have
// connection thresholds. Flows that end without the program seeing it, idle ones and those the
// LRU evicts, are counted by the loader: recount walks the flow table every recountEvery and
// writes each counted backend's lost flows (opened - closed - active, modulo 2^64), so that the program's
// count is the backend's active flows, exact to the flows opened or closed during one walk.

// recountEvery is how often the daemon recounts the active flows of counted backends.
const recountEvery = 2 * time.Second

// counts is one backend's connection counts as the program sees them.
type counts struct {
	conns sluiceConnCounts
	lost  uint64
}

// active is the backend's active flows by the program's count.
func (c counts) active() uint64 {
	n := int64(c.conns.Opened - c.conns.Closed - c.lost)
	return uint64(max(n, 0))
}

// readCounts reads a backend's counts; zero when the maps predate them.
func readCounts(m *kernelMaps, id uint32) (counts, error) {
	var c counts
	if m.BackendConns == nil || m.BackendLost == nil {
		return c, nil
	}
	if err := m.BackendConns.Lookup(id, &c.conns); err != nil {
		return c, err
	}
	return c, m.BackendLost.Lookup(id, &c.lost)
}

// counted tells whether the program counts the connections of a service's backends.
func (r *serviceRecord) counted() bool {
	return sluiceServiceFlags(r.Flags>>serviceFlagsShift)&sluiceServiceFlagsSERVICE_COUNT_CONNS != 0
}

// recount writes the lost flows of every counted backend. It skips its turn while an Apply or
// another call holds the datapath.
func (d *Datapath) recount() error {
	if !d.mu.TryLock() {
		return nil
	}
	defer d.mu.Unlock()
	if d.maps == nil || d.state == nil {
		return nil
	}
	counted := map[uint32]bool{}
	for _, s := range d.state.services {
		if s.rec.counted() {
			for _, b := range s.backends {
				counted[b.id] = true
			}
		}
	}
	if len(counted) == 0 {
		return nil
	}
	active, err := activeFlows(d.maps, d.state)
	if err != nil {
		return err
	}
	w := writer{}
	for id := range counted {
		c, err := readCounts(d.maps, id)
		if err != nil {
			return err
		}
		// Wrapping arithmetic: "lost" is negative (flows the program saw close but not open,
		// as when a service starts counting) as often as positive.
		lost := c.conns.Opened - c.conns.Closed - active[id]
		if lost != c.lost {
			if err := w.put(d.maps.BackendLost, id, lost); err != nil {
				return err
			}
		}
	}
	return nil
}
