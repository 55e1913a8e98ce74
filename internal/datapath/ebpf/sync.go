package ebpf

import (
	"fmt"
	"time"

	"github.com/cilium/ebpf"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/plan"
)

// syncer programs a plan into the maps, writing only what differs from its state, which it
// keeps up to date. Within a service it writes in an order that never shows the program a
// half-made service: backends before the ring slots that refer to them, the ring before the vips
// entries that refer to it, a new ring before the old one is freed. Backends and services that
// leave the plan are retired, not removed: they stay valid for the flows that still use them.
type syncer struct {
	m  *kernelMaps
	st *state
	w  writer
	// events keeps the program handing new and closing flows to flow_events (config's
	// flow_events), for WatchFlows.
	events bool
	// prevSkipped counts the changed slots a full maglev_prev could not remember.
	prevSkipped int
}

// plan programs p. Services whose plan did not change since st recorded it are skipped, so the
// cost of an Apply follows what changed, not the size of the rest.
func (s *syncer) plan(p *plan.Plan) error {
	if err := checkLimits(p, s.st.limits); err != nil {
		return err
	}
	if err := s.globals(p); err != nil {
		return err
	}
	if err := s.forgetPrevExpired(); err != nil {
		return err
	}
	inPlan := make(map[string]bool, len(p.Services))
	for i := range p.Services {
		ps := &p.Services[i]
		inPlan[ps.Name] = true
		if cur := s.st.services[ps.Name]; cur != nil && cur.planned != nil && cur.planned.Equal(ps) {
			continue
		}
		if err := s.service(ps); err != nil {
			return fmt.Errorf("service %s: %w", ps.Name, err)
		}
	}
	for name, cur := range s.st.services {
		if !inPlan[name] && !cur.rec.retired() {
			if err := s.retireService(cur); err != nil {
				return fmt.Errorf("removing service %s: %w", name, err)
			}
		}
	}
	if !s.st.readBack {
		return nil
	}
	if err := s.cleanup(); err != nil {
		return err
	}
	s.st.readBack = false
	return s.sweep()
}

// service programs one service of the plan.
func (s *syncer) service(ps *plan.Service) error {
	rec, err := serviceRecordOf(ps)
	if err != nil {
		return err
	}
	cur := s.st.services[ps.Name]
	if cur == nil {
		id, ok := s.st.serviceIDs.alloc()
		if !ok {
			return fmt.Errorf("no free service id (%d)", s.st.limits.services)
		}
		if err := s.resetStats(s.m.ServiceStats, id); err != nil {
			return err
		}
		if err := s.w.put(s.m.ServiceRefusals, id, []sluiceRefusals{}); err != nil {
			return err
		}
		if err := s.w.put(s.m.ServiceUnforwarded, id, []sluiceUnforwarded{}); err != nil {
			return err
		}
		if s.m.SecondChances != nil {
			if err := s.w.put(s.m.SecondChances, id, []uint64{}); err != nil {
				return err
			}
		}
		cur = &serviceState{id: id, backends: map[string]*backendState{}}
		s.st.addService(ps.Name, cur)
	}
	ids, err := s.backends(cur, ps)
	if err != nil {
		return err
	}
	if err := s.sources(cur, ps, serviceSettingsOf(ps)); err != nil {
		return err
	}
	if err := s.natSource(cur, ps); err != nil {
		return err
	}
	if err := s.tunnel(cur, ps); err != nil {
		return err
	}
	ring := make([]uint32, len(ps.Slots))
	for i, b := range ps.Slots {
		ring[i] = ids[b]
	}
	old := cur.rec
	if err := s.ring(cur, &rec, ring, ps.FlowTimeout); err != nil {
		return err
	}
	if err := s.vips(cur.id, old, rec, cur.ports, ps.Ports); err != nil {
		return err
	}
	cur.ports = ps.Ports
	if old.RingSize > 0 && old.RingSize != rec.RingSize {
		s.st.ring.free(old.RingOffset) // ring replaced, or gone
	}
	if rec != cur.rec {
		if err := s.w.put(s.m.ServiceMeta, cur.id, rec); err != nil {
			return err
		}
		cur.rec = rec
	}
	kept := make(map[string]bool, len(ps.Backends))
	for _, b := range ps.Backends {
		kept[b.ID()] = true
	}
	for key, b := range cur.backends {
		if !kept[key] {
			if err := s.retireBackend(b); err != nil {
				return err
			}
		}
	}
	planned := *ps
	cur.planned = &planned
	return nil
}

// backends programs a service's backends and returns their ids, in order. A backend keeps its
// id while it stays in the service (retired ones come back with theirs); its record is written
// before its entry, so that a valid entry always has a record.
func (s *syncer) backends(cur *serviceState, ps *plan.Service) ([]uint32, error) {
	ids := make([]uint32, len(ps.Backends))
	for i, b := range ps.Backends {
		bs := cur.backends[b.ID()]
		if bs == nil {
			id, ok := s.st.backendIDs.alloc()
			if !ok {
				return nil, fmt.Errorf("no free backend id (%d)", s.st.limits.backends)
			}
			if err := s.resetStats(s.m.BackendStats, id); err != nil {
				return nil, err
			}
			bs = &backendState{id: id}
			cur.backends[b.ID()] = bs
		}
		if opts := backendSettingsOf(ps, b); bs.opts != opts {
			if err := s.w.put(s.m.BackendOpts, bs.id, opts); err != nil {
				return nil, err
			}
			bs.opts = opts
		}
		if rec := backendRecordOf(cur.id, b); bs.rec != rec {
			if err := s.w.put(s.m.BackendMeta, bs.id, rec); err != nil {
				return nil, err
			}
			bs.rec = rec
		}
		if e := bs.rec.entry(); bs.entry != e {
			if err := s.w.put(s.m.Backends, bs.id, e); err != nil {
				return nil, err
			}
			bs.entry = e
		}
		ids[i] = bs.id
	}
	return ids, nil
}

// ring writes a service's Maglev table and sets its place in rec: in place, only the slots that
// changed (their previous backends kept for flowTimeout: second chance), when its size did not
// change; else all of it in a newly allocated range.
func (s *syncer) ring(cur *serviceState, rec *serviceRecord, want []uint32, flowTimeout time.Duration) error {
	n := uint32(len(want))
	var keys, values []uint32
	if cur.rec.RingSize > 0 && n != cur.rec.RingSize {
		if err := s.forgetPrevRing(cur.rec.RingOffset, cur.rec.RingSize); err != nil {
			return err
		}
	}
	if n > 0 && n == cur.rec.RingSize {
		rec.RingOffset = cur.rec.RingOffset
		for i, b := range want {
			if cur.slots[i] != b {
				keys, values = append(keys, rec.RingOffset+uint32(i)), append(values, b)
			}
		}
		if err := s.rememberPrev(cur, rec.RingOffset, cur.slots, want, flowTimeout); err != nil {
			return err
		}
	} else if n > 0 {
		offset, err := s.st.ring.alloc(n)
		if err != nil {
			return err
		}
		rec.RingOffset = offset
		for i, b := range want {
			keys, values = append(keys, offset+uint32(i)), append(values, b)
		}
	}
	rec.RingSize = n
	cur.slots = want
	return putAll(&s.w, s.m.Maglev, keys, values)
}

// vips points a service's keys at its record (new ring, mode, fallback), for its ports, then
// deletes the keys it no longer has. A retired service keeps only the keys no other service took
// over.
func (s *syncer) vips(id uint32, old, rec serviceRecord, oldPorts, ports config.PortList) error {
	value := rec.vipValue(id)
	var keys []sluiceVipKey
	var values []sluiceService
	for _, k := range rec.vipKeys(ports) {
		v, ok := s.st.vips[k]
		if rec.retired() && (!ok || v.Id != id) {
			continue
		}
		if !ok || v != value {
			keys, values = append(keys, k), append(values, value)
		}
	}
	if err := putAll(&s.w, s.m.Vips, keys, values); err != nil {
		return err
	}
	for _, k := range keys {
		s.st.vips[k] = value
	}
	var gone []sluiceVipKey
	for _, k := range old.vipKeys(oldPorts) {
		if v, ok := s.st.vips[k]; ok && v.Id == id && !rec.owns(k, ports) {
			gone = append(gone, k)
		}
	}
	return s.deleteVips(gone)
}

func (s *syncer) deleteVips(keys []sluiceVipKey) error {
	if err := deleteAll(&s.w, s.m.Vips, keys); err != nil {
		return err
	}
	for _, k := range keys {
		delete(s.st.vips, k)
	}
	return nil
}

// retireService takes a service out of the plan, the way conntrack keeps the nft datapath's
// translated flows: its vips entries stay, marked retired, so that its established flows are
// still forwarded while new ones pass to the stack; its ring is freed; its backends and record
// stay, retired, until sweep finds their flows idle. A service without backends goes at once.
func (s *syncer) retireService(cur *serviceState) error {
	if len(cur.backends) == 0 {
		return s.dropService(cur)
	}
	rec := cur.rec
	rec.Flags |= recordRetired
	rec.RingOffset, rec.RingSize = 0, 0
	if err := s.vips(cur.id, cur.rec, rec, cur.ports, cur.ports); err != nil {
		return err
	}
	if cur.rec.RingSize > 0 {
		if err := s.forgetPrevRing(cur.rec.RingOffset, cur.rec.RingSize); err != nil {
			return err
		}
		s.st.ring.free(cur.rec.RingOffset)
	}
	cur.slots, cur.planned = nil, nil
	for _, b := range cur.backends {
		if err := s.retireBackend(b); err != nil {
			return err
		}
	}
	cur.rec = rec
	return s.w.put(s.m.ServiceMeta, cur.id, rec)
}

// dropService removes a service that no flow uses any more: the vips entries it still holds, its
// ring, its record and its id.
func (s *syncer) dropService(cur *serviceState) error {
	var held []sluiceVipKey
	for _, k := range cur.rec.vipKeys(cur.ports) {
		if v, ok := s.st.vips[k]; ok && v.Id == cur.id {
			held = append(held, k)
		}
	}
	if err := s.deleteVips(held); err != nil {
		return err
	}
	if cur.rec.RingSize > 0 {
		if err := s.forgetPrevRing(cur.rec.RingOffset, cur.rec.RingSize); err != nil {
			return err
		}
		s.st.ring.free(cur.rec.RingOffset)
	}
	s.st.dropService(cur)
	if cur.opts != (sluiceServiceSettings{}) { // the next service given the id starts from none
		for _, z := range []struct {
			m     *ebpf.Map
			value any
		}{
			{s.m.ServiceOpts, sluiceServiceSettings{}}, {s.m.ServiceRate, uint64(0)},
			{s.m.ServiceConns, sluiceConnCounts{}}, {s.m.ServiceLost, uint64(0)},
		} {
			if err := s.w.put(z.m, cur.id, z.value); err != nil {
				return err
			}
		}
	}
	if err := s.dropSources(cur, cur.sources); err != nil {
		return err
	}
	return s.w.delete(s.m.ServiceMeta, cur.id)
}

// retireBackend marks a backend that left its service: it takes no new flow (no slot refers to
// it) and stays valid for its established ones, like a conntrack entry of the nft datapath.
func (s *syncer) retireBackend(b *backendState) error {
	if b.rec.retired() {
		return nil
	}
	rec := b.rec
	rec.Flags |= recordRetired
	b.rec = rec
	if err := s.w.put(s.m.BackendMeta, b.id, rec); err != nil {
		return err
	}
	// Still valid for its flows, it no longer takes new ones, persistent clients included.
	if e := rec.entry(); e != b.entry {
		if err := s.w.put(s.m.Backends, b.id, e); err != nil {
			return err
		}
		b.entry = e
	}
	return nil
}

// resetConnections zeroes the settings and connection counts of a backend whose id is freed,
// so that the next backend given the id starts from none.
func (s *syncer) resetConnections(b *backendState) error {
	if b.opts == (sluiceBackendSettings{}) {
		return nil // never counted
	}
	if err := s.w.put(s.m.BackendOpts, b.id, sluiceBackendSettings{}); err != nil {
		return err
	}
	if err := s.w.put(s.m.BackendConns, b.id, sluiceConnCounts{}); err != nil {
		return err
	}
	return s.w.put(s.m.BackendLost, b.id, uint64(0))
}

// resetStats zeroes the counters of a newly allocated id on every CPU (an empty per-CPU value
// is zero-padded).
func (s *syncer) resetStats(m *ebpf.Map, id uint32) error {
	return s.w.put(m, id, []sluiceStats{})
}
