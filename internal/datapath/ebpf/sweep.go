package ebpf

// sweep frees what retired backends and services hold once nothing uses them. A retired backend
// none of whose flows is active any more (see flowIsActive) loses those flows and their replies
// entries, its backends entry (made invalid: a flow still pointing to it picks a backend anew)
// and then its record and id; a retired service left without backends loses its vips entries,
// record and id.
// Ids are thus handed out again only once no flow refers to them. It scans the flow table, so it
// runs on the syncs that read the maps back (first use, restart, Resync), not on every Apply.
func (s *syncer) sweep() error {
	type retiree struct {
		service *serviceState
		key     string
		backend *backendState
	}
	retired := map[uint32]retiree{}
	for _, svc := range s.st.services {
		for key, b := range svc.backends {
			if b.rec.retired() {
				retired[b.id] = retiree{svc, key, b}
			}
		}
	}
	if len(retired) == 0 {
		return nil
	}
	busy := map[uint32]bool{}
	now := monotonicNow()
	err := readAll(s.m.Flows, func(_ sluiceFlowKey, f sluiceFlow) bool {
		if r, ok := retired[f.BackendId]; ok && flowIsActive(f, now, &r.service.rec) {
			busy[f.BackendId] = true
		}
		return true
	})
	if err != nil {
		return err
	}
	idle := map[uint32]bool{}
	for id := range retired {
		if !busy[id] {
			idle[id] = true
		}
	}
	if len(idle) == 0 {
		return nil
	}
	if err := s.forgetPrevBackends(idle); err != nil {
		return err
	}
	for id := range idle {
		if err := s.w.put(s.m.Backends, id, sluiceBackend{}); err != nil {
			return err
		}
	}
	if _, err := deleteFlowsOf(&s.w, s.m, idle); err != nil {
		return err
	}
	for id := range idle {
		r := retired[id]
		if err := s.w.delete(s.m.BackendMeta, id); err != nil {
			return err
		}
		if err := s.resetConnections(r.backend); err != nil {
			return err
		}
		delete(r.service.backends, r.key)
		s.st.backendIDs.free(id)
		if r.service.rec.retired() && len(r.service.backends) == 0 {
			if err := s.dropService(r.service); err != nil {
				return err
			}
		}
	}
	return nil
}
