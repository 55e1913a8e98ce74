package ebpf

// cleanup removes, after a read back, what no record explains: vips entries of no service (or of
// a port a service does not have) and backends entries or records of ids no service uses.
func (s *syncer) cleanup() error {
	var gone []sluiceVipKey
	for k, v := range s.st.vips {
		if owner := s.st.byID[v.Id]; owner == nil || !owner.rec.owns(k, owner.ports) {
			gone = append(gone, k)
		}
	}
	if err := s.deleteVips(gone); err != nil {
		return err
	}
	for _, id := range s.st.strays.entries {
		if !s.st.backendIDs.has(id) {
			if err := s.w.put(s.m.Backends, id, sluiceBackend{}); err != nil {
				return err
			}
		}
	}
	for _, id := range s.st.strays.records {
		if !s.st.backendIDs.has(id) {
			if err := s.w.delete(s.m.BackendMeta, id); err != nil {
				return err
			}
		}
	}
	for _, id := range s.st.strays.services {
		if !s.st.serviceIDs.has(id) {
			if err := s.w.delete(s.m.ServiceMeta, id); err != nil {
				return err
			}
		}
	}
	s.st.strays = strays{}
	return nil
}
