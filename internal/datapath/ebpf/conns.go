package ebpf

import (
	"time"

	"github.com/cilium/ebpf"
)

// The program counts the flows it opens to a backend and those whose client closes them (FIN,
// RST) or that it rebalances, for the services that pick by connections (lc, wlc) or have
// connection thresholds, and likewise per service and per client for the services with
// connection limits. Flows that end without the program seeing it, idle ones and those the LRU
// evicts, are counted by the loader: recount walks the flow table every recountEvery and writes
// each counted backend's, service's and client's lost flows (opened - closed - active, modulo
// 2^64), so that the program's count is the active flows, exact to the flows opened or closed
// during one walk.

// recountEvery is how often the daemon recounts the active flows of what the program counts.
const recountEvery = 2 * time.Second

// counts is one backend's connection counts as the program sees them.
type counts struct {
	conns sluiceConnCounts
	lost  uint64
}

// active is the backend's active flows by the program's count.
func (c counts) active() uint64 { return activeOf(c.conns.Opened, c.conns.Closed, c.lost) }

// activeOf is the program's active_of: opened - closed - lost, as a signed count, at least 0.
func activeOf(opened, closed, lost uint64) uint64 {
	return uint64(max(int64(opened-closed-lost), 0))
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

// flags are the service_flags the record's service has.
func (r *serviceRecord) flags() sluiceServiceFlags {
	return sluiceServiceFlags(r.Flags >> serviceFlagsShift)
}

// counted tells whether the program counts the connections of a service's backends.
func (r *serviceRecord) counted() bool { return r.flags()&sluiceServiceFlagsSERVICE_COUNT_CONNS != 0 }

// limited tells whether the program counts the service's and its clients' flows for limits.
func (r *serviceRecord) limited() bool { return r.flags()&sluiceServiceFlagsSERVICE_LIMITS != 0 }

// tally is the active flows of what the program counts, from one walk of the flow table.
type tally struct {
	backends map[uint32]uint64
	services map[uint32]uint64
	clients  map[sluiceClientKey]uint64
}

// tallyFlows walks the flow table once and counts the active flows of the counted backends and
// of the limited services and their clients.
func tallyFlows(m *kernelMaps, st *state) (tally, error) {
	t := tally{backends: map[uint32]uint64{}, services: map[uint32]uint64{}, clients: map[sluiceClientKey]uint64{}}
	owner := map[uint32]*serviceRecord{}
	for _, s := range st.services {
		if s.rec.counted() {
			for _, b := range s.backends {
				owner[b.id] = &s.rec
			}
		}
	}
	now := monotonicNow()
	err := readAll(m.Flows, func(k sluiceFlowKey, f sluiceFlow) bool {
		if rec := owner[f.BackendId]; rec != nil && flowIsActive(f, now, rec) {
			t.backends[f.BackendId]++
		}
		if s := st.byID[f.ServiceId]; s != nil && s.rec.limited() && flowIsActive(f, now, &s.rec) {
			t.services[f.ServiceId]++
			t.clients[sluiceClientKey{Addr: k.Src, ServiceId: f.ServiceId}]++
		}
		return true
	})
	return t, err
}

// recount writes the lost flows of every counted backend, limited service and its clients. It
// skips its turn while an Apply or another call holds the datapath.
func (d *Datapath) recount() error {
	if !d.mu.TryLock() {
		return nil
	}
	defer d.mu.Unlock()
	if d.maps == nil || d.state == nil {
		return nil
	}
	var counted, limited []uint32
	for _, s := range d.state.services {
		if s.rec.counted() {
			for _, b := range s.backends {
				counted = append(counted, b.id)
			}
		}
		if s.rec.limited() {
			limited = append(limited, s.id)
		}
	}
	if len(counted) == 0 && len(limited) == 0 {
		return nil
	}
	t, err := tallyFlows(d.maps, d.state)
	if err != nil {
		return err
	}
	w := writer{}
	for _, id := range counted {
		if err := correct(&w, d.maps.BackendConns, d.maps.BackendLost, id, t.backends[id]); err != nil {
			return err
		}
	}
	for _, id := range limited {
		if err := correct(&w, d.maps.ServiceConns, d.maps.ServiceLost, id, t.services[id]); err != nil {
			return err
		}
	}
	if len(limited) == 0 {
		return nil
	}
	return d.correctClients(&w, t.clients)
}

// correct writes the lost flows of one id of a conns/lost pair of maps given its active flows.
func correct(w *writer, conns, lost *ebpf.Map, id uint32, active uint64) error {
	var c sluiceConnCounts
	var was uint64
	if err := conns.Lookup(id, &c); err != nil {
		return err
	}
	if err := lost.Lookup(id, &was); err != nil {
		return err
	}
	// Wrapping arithmetic: "lost" is negative (flows the program saw close but not open, as
	// when counting starts) as often as positive.
	if now := c.Opened - c.Closed - active; now != was {
		return w.put(lost, id, now)
	}
	return nil
}

// correctClients writes the lost flows of every tracked client of a limited service. A client
// entry is written whole: an increment the program makes meanwhile is lost with it, and the next
// recount's lost absorbs that.
func (d *Datapath) correctClients(w *writer, active map[sluiceClientKey]uint64) error {
	var k sluiceClientKey
	var c sluiceClientState
	type fix struct {
		k sluiceClientKey
		c sluiceClientState
	}
	var fixes []fix
	it := d.maps.Clients.Iterate()
	for it.Next(&k, &c) {
		if s := d.state.byID[k.ServiceId]; s == nil || !s.rec.limited() {
			continue
		}
		if lost := c.Opened - c.Closed - active[k]; lost != c.Lost {
			c.Lost = lost
			fixes = append(fixes, fix{k, c})
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	for _, f := range fixes {
		if err := w.put(d.maps.Clients, f.k, f.c); err != nil {
			return err
		}
	}
	return nil
}
