package ebpf

import (
	"context"
	"time"

	"github.com/cilium/ebpf"
)

// Second chance: when a service's table changes in place, the slots whose backend changed keep
// their previous backend in maglev_prev for the service's flow_timeout. A mid-flow TCP segment
// without a flow (its connection began on another node that did not hand it over, or before the
// flow table lost it) whose slot changed goes to that previous backend rather than to the new
// one, which would reset it. The program checks the entry's service, expiry and backend; the
// syncer removes entries that expired, whose ring went away or whose backend id was freed, so
// that none can point into another service's table or at a reused backend id. A table that
// changes size (backends added past a size step, table_size changed) gets no second chance: its
// slots no longer say which flows they held.

// prevSlots mirrors maglev_prev: global slot -> entry.
type prevSlots map[uint32]sluicePrevSlot

// rememberPrev records, for the slots of service cur's ring at offset that change from was to
// want, the backend they had until flowTimeout from now: only the service's own backends (a slot
// that others damaged is repaired, not remembered), and not over a slot remembered already (a
// slot keeps the backend it had before its first change within flow_timeout, as on nft). A full
// map is not an error: those slots get no second chance, which the count in s.prevSkipped tells.
func (s *syncer) rememberPrev(cur *serviceState, offset uint32, was, want []uint32, flowTimeout time.Duration) error {
	if s.m.MaglevPrev == nil || flowTimeout <= 0 {
		return nil
	}
	own := make(map[uint32]bool, len(cur.backends))
	for _, b := range cur.backends {
		own[b.id] = true
	}
	now := monotonicNow()
	until := now + uint64(flowTimeout)
	var keys []uint32
	var values []sluicePrevSlot
	for i, b := range want {
		_, held := s.st.prev[offset+uint32(i)]
		if i < len(was) && was[i] != b && own[was[i]] && !held {
			keys = append(keys, offset+uint32(i))
			values = append(values, sluicePrevSlot{BackendId: was[i], ServiceId: cur.id, UntilNs: until})
		}
	}
	for len(keys) > 0 {
		n := min(len(keys), batchSize)
		done, err := s.m.MaglevPrev.BatchUpdate(keys[:n], values[:n], nil)
		s.w.entries += done
		if s.st.prevChanged == nil {
			s.st.prevChanged = map[uint32]uint64{}
		}
		for i := range done {
			s.st.prev[keys[i]] = values[i]
			s.st.prevChanged[keys[i]] = now
		}
		if err != nil {
			s.prevSkipped += len(keys) - done
			return nil
		}
		keys, values = keys[n:], values[n:]
	}
	return nil
}

// forgetPrev deletes the entries of maglev_prev that gone says are gone.
func (s *syncer) forgetPrev(gone func(slot uint32, e sluicePrevSlot) bool) error {
	return forgetPrev(&s.w, s.m, s.st, gone)
}

// forgetPrev deletes the entries of m's maglev_prev (mirrored in st) that gone says are gone.
func forgetPrev(w *writer, m *kernelMaps, st *state, gone func(slot uint32, e sluicePrevSlot) bool) error {
	if m.MaglevPrev == nil || len(st.prev) == 0 {
		return nil
	}
	var keys []uint32
	for slot, e := range st.prev {
		if gone(slot, e) {
			keys = append(keys, slot)
		}
	}
	if err := deleteAll(w, m.MaglevPrev, keys); err != nil {
		return err
	}
	for _, k := range keys {
		delete(st.prev, k)
		delete(st.prevChanged, k)
	}
	return nil
}

// ReplicatedUntil deletes the second chances of the slots that changed before t: every flow the
// peers created before then is in the flow table, so a mid-flow packet without a flow here
// belongs to a flow begun after the change, which the current table placed (on the node it
// began on, too), and the previous backend would reset it. Slots read back from the maps (this
// process did not see them change) keep their second chance for the service's flow_timeout. See
// datapath.FlowReplicator.
func (d *Datapath) ReplicatedUntil(_ context.Context, t time.Time) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.state
	if st == nil || len(st.prevChanged) == 0 || d.maps == nil {
		return nil
	}
	cut, ok := monotonicAt(t)
	if !ok {
		return nil
	}
	var covered []uint32
	for slot, at := range st.prevChanged {
		if at < cut {
			covered = append(covered, slot)
		}
	}
	var w writer
	if err := deleteAll(&w, d.maps.MaglevPrev, covered); err != nil {
		return err
	}
	for _, slot := range covered {
		delete(st.prev, slot)
		delete(st.prevChanged, slot)
	}
	return nil
}

// monotonicAt is time t on the programs' clock (see monotonicNow); false when t is before that
// clock's start. A t in the future is now.
func monotonicAt(t time.Time) (uint64, bool) {
	now := monotonicNow()
	ago := max(time.Since(t), 0)
	if uint64(ago) >= now {
		return 0, false
	}
	return now - uint64(ago), true
}

// forgetPrevExpired deletes the entries past their time.
func (s *syncer) forgetPrevExpired() error {
	now := monotonicNow()
	return s.forgetPrev(func(_ uint32, e sluicePrevSlot) bool { return int64(e.UntilNs-now) <= 0 })
}

// forgetPrevRing deletes the entries of a ring that is freed or replaced.
func (s *syncer) forgetPrevRing(offset, size uint32) error {
	return s.forgetPrev(func(slot uint32, _ sluicePrevSlot) bool { return slot >= offset && slot-offset < size })
}

// forgetPrevBackends deletes the entries naming backend ids about to be freed.
func (s *syncer) forgetPrevBackends(ids map[uint32]bool) error {
	return s.forgetPrev(func(_ uint32, e sluicePrevSlot) bool { return ids[e.BackendId] })
}

// readPrev reads maglev_prev back.
func readPrev(m *ebpf.Map, st *state) error {
	if m == nil {
		return nil
	}
	return readAll(m, func(slot uint32, e sluicePrevSlot) bool { st.prev[slot] = e; return true })
}

// secondChances sums a service's second chances over the CPUs.
func secondChances(m *ebpf.Map, id uint32) (uint64, error) {
	if m == nil {
		return 0, nil
	}
	var per []uint64
	if err := m.Lookup(id, &per); err != nil {
		return 0, err
	}
	var n uint64
	for _, c := range per {
		n += c
	}
	return n, nil
}
