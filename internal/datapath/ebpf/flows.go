package ebpf

import (
	"context"
	"time"

	"github.com/sluicelb/sluice/internal/plan"
)

// A flow is an entry of flows: the program creates it on a flow's first packet and stamps
// last_seen on each packet; the LRU evicts it when the table is full. Closed and open TCP
// connections look alike there, so a flow counts as active while it saw a packet within its
// service's flow timeout (flow_timeout, 5m by default): a connection idle for longer is not
// counted, one closed less than that ago still is.

// flowIsActive tells whether a flow is open (no FIN or RST from its client) and saw a packet
// within its service's flow timeout before now.
func flowIsActive(f sluiceFlow, now uint64, rec *serviceRecord) bool {
	return f.Flags&sluiceFlowFlagsFLOW_CLOSING == 0 && f.LastSeen+uint64(rec.FlowTimeout)*uint64(time.Second) > now
}

// activeFlows counts the active flows of every backend of st, by backend id.
func activeFlows(m *kernelMaps, st *state) (map[uint32]uint64, error) {
	owner := map[uint32]*serviceRecord{}
	for _, s := range st.services {
		for _, b := range s.backends {
			owner[b.id] = &s.rec
		}
	}
	now := monotonicNow()
	active := map[uint32]uint64{}
	err := readAll(m.Flows, func(_ sluiceFlowKey, f sluiceFlow) bool {
		if rec := owner[f.BackendId]; rec != nil && flowIsActive(f, now, rec) {
			active[f.BackendId]++
		}
		return true
	})
	return active, err
}

// ResetFlows deletes the flows from a service's clients to one of its backends, with their reply
// entries: the client's next packet is balanced anew, and a TCP segment reaching a backend that
// does not know its connection is answered with a reset. It returns how many flows it deleted.
func (d *Datapath) ResetFlows(_ context.Context, s *plan.Service, b plan.Backend) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	m, err := d.pinnedMaps()
	if m == nil {
		return 0, err
	}
	st := d.state
	if st == nil {
		if st, err = readState(m); err != nil {
			return 0, err
		}
	}
	svc := st.services[s.Name]
	if svc == nil || svc.backends[b.ID()] == nil {
		return 0, nil
	}
	id := svc.backends[b.ID()].id
	// A reset flow must break, not come back to the backend by second chance.
	if err := forgetPrev(&writer{}, m, st, func(_ uint32, e sluicePrevSlot) bool { return e.BackendId == id }); err != nil {
		return 0, err
	}
	return deleteFlowsOf(&writer{}, m, map[uint32]bool{id: true})
}

// deleteFlowsOf deletes the flows to some backends (by id) and their replies entries; it returns
// how many flows it deleted.
func deleteFlowsOf(w *writer, m *kernelMaps, backends map[uint32]bool) (int, error) {
	var flows, replies []sluiceFlowKey
	err := readAll(m.Flows, func(k sluiceFlowKey, f sluiceFlow) bool {
		if backends[f.BackendId] {
			flows = append(flows, k)
		}
		return true
	})
	if err != nil {
		return 0, err
	}
	err = readAll(m.Replies, func(k sluiceFlowKey, r sluiceReverse) bool {
		if backends[r.BackendId] {
			replies = append(replies, k)
		}
		return true
	})
	if err != nil {
		return 0, err
	}
	before := w.entries
	if err := deleteAll(w, m.Flows, flows); err != nil {
		return w.entries - before, err
	}
	n := w.entries - before
	return n, deleteAll(w, m.Replies, replies)
}
