package ebpf

import (
	"context"
	"sort"

	"github.com/cilium/ebpf"

	"github.com/sluicelb/sluice/internal/datapath"
)

// Status reads the programmed services back from the pinned maps: records, rings (for the
// shares), per-CPU counters summed over the CPUs, and active flows counted in the flow table.
// Retired services and backends, which only serve their last flows, are not listed. Nothing
// pinned reads as no services.
func (d *Datapath) Status(context.Context) ([]datapath.ServiceStatus, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	m, err := d.pinnedMaps()
	if m == nil {
		return nil, err
	}
	st, err := readState(m)
	if err != nil {
		return nil, err
	}
	active, err := activeFlows(m, st)
	if err != nil {
		return nil, err
	}
	var out []datapath.ServiceStatus
	for _, s := range st.services {
		if s.rec.retired() {
			continue
		}
		ss, err := serviceStatus(m, s, active)
		if err != nil {
			return nil, err
		}
		out = append(out, ss)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

var _ datapath.ServiceReader = (*Datapath)(nil)

// ServiceStatus reads one service from what the last Apply programmed (from the maps when that
// is not known), so that its cost does not grow with the other services; its active flows still
// take one pass over the flow table.
func (d *Datapath) ServiceStatus(_ context.Context, name string) (datapath.ServiceStatus, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	m, err := d.pinnedMaps()
	if m == nil {
		return datapath.ServiceStatus{}, false, err
	}
	st := d.state
	if st == nil {
		if st, err = readState(m); err != nil {
			return datapath.ServiceStatus{}, false, err
		}
	}
	s := st.services[name]
	if s == nil || s.rec.retired() {
		return datapath.ServiceStatus{}, false, nil
	}
	active, err := activeFlows(m, st)
	if err != nil {
		return datapath.ServiceStatus{}, false, err
	}
	out, err := serviceStatus(m, s, active)
	return out, err == nil, err
}

// serviceStatus describes one service, its backends by ID like the plan's.
func serviceStatus(m *kernelMaps, s *serviceState, active map[uint32]uint64) (datapath.ServiceStatus, error) {
	rec := &s.rec
	out := datapath.ServiceStatus{
		Name: rec.name(), Protocol: wireName(wireProtocols, rec.Proto), VIP: rec.vip().String(), Ports: s.ports.String(),
		Mode: wireName(wireModes, rec.Mode), Scheduler: rec.scheduler(), Slots: int(rec.RingSize),
	}
	if m.ServiceRefusals != nil {
		refused, err := sumRefusals(m.ServiceRefusals, s.id)
		if err != nil {
			return out, err
		}
		out.Refused = refused
	}
	if m.ServiceUnforwarded != nil {
		unforwarded, err := sumUnforwarded(m.ServiceUnforwarded, s.id)
		if err != nil {
			return out, err
		}
		out.Unforwarded = unforwarded
	}
	second, err := secondChances(m.SecondChances, s.id)
	if err != nil {
		return out, err
	}
	if out.Tunnel, err = tunnelCounts(m, rec, s.id); err != nil {
		return out, err
	}
	out.SecondChances = second
	owned := map[uint32]int{}
	for _, id := range s.slots {
		owned[id]++
	}
	keys := make([]string, 0, len(s.backends))
	for key, b := range s.backends {
		if !b.rec.retired() {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	for _, key := range keys {
		b := s.backends[key]
		pb := b.rec.backend()
		bs := datapath.BackendStatus{Address: pb.Addr.String(), Port: int(pb.Port), Weight: pb.Weight, ActiveFlows: active[b.id]}
		if rec.RingSize > 0 {
			bs.Share = float64(owned[b.id]) / float64(rec.RingSize)
		}
		c, err := sumStats(m.BackendStats, b.id)
		if err != nil {
			return out, err
		}
		bs.Flows, bs.Packets, bs.Bytes = c.Flows, &c.Packets, &c.Bytes
		if rec.counted() { // the program's own count: what it picks by
			k, err := readCounts(m, b.id)
			if err != nil {
				return out, err
			}
			bs.Connections = k.active()
			// The program marks a backend overloaded when a pick finds it full and clears the mark
			// at a later pick: between picks the counts say it.
			full := b.opts.MaxConns > 0 && bs.Connections >= uint64(b.opts.MaxConns)
			bs.Overloaded = full || k.conns.Overloaded != 0 && bs.Connections > uint64(b.opts.MinConns)
		}
		out.Backends = append(out.Backends, bs)
	}
	return out, nil
}

// sumRefusals adds up the per-CPU refusal counters of a service id.
func sumRefusals(m *ebpf.Map, id uint32) (datapath.Refusals, error) {
	var perCPU []sluiceRefusals
	var sum datapath.Refusals
	if err := m.Lookup(id, &perCPU); err != nil {
		return sum, err
	}
	for _, c := range perCPU {
		sum.SourceList += c.Source
		sum.ConnectionsPerSource += c.ClientConns
		sum.Connections += c.Conns
		sum.NewConnectionsPerSourcePerSecond += c.ClientRate
		sum.NewConnectionsPerSecond += c.Rate
	}
	return sum, nil
}

// sumUnforwarded adds up the per-CPU counters of the packets of a service id the program could not
// forward.
func sumUnforwarded(m *ebpf.Map, id uint32) (datapath.Unforwarded, error) {
	var perCPU []sluiceUnforwarded
	var sum datapath.Unforwarded
	if err := m.Lookup(id, &perCPU); err != nil {
		return sum, err
	}
	for _, c := range perCPU {
		sum.ForwardingDisabled += c.FwdDisabled
		sum.NoRoute += c.NoRoute
		sum.NoNeighbour += c.NoNeigh
	}
	return sum, nil
}

// sumStats adds up the per-CPU counters of an id.
func sumStats(m *ebpf.Map, id uint32) (sluiceStats, error) {
	var perCPU []sluiceStats
	var sum sluiceStats
	if err := m.Lookup(id, &perCPU); err != nil {
		return sum, err
	}
	for _, c := range perCPU {
		sum.Packets += c.Packets
		sum.Bytes += c.Bytes
		sum.Flows += c.Flows
	}
	return sum, nil
}

var _ datapath.UnforwardedReader = (*Datapath)(nil)

// Unforwarded reads the counters of the packets the program could not forward, of every service
// that has any: one map lookup per service, without the flow table pass of Status.
func (d *Datapath) Unforwarded(context.Context) (map[string]datapath.Unforwarded, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	m, err := d.pinnedMaps()
	if m == nil || m.ServiceUnforwarded == nil {
		return nil, err
	}
	st := d.state
	if st == nil {
		if st, err = readState(m); err != nil {
			return nil, err
		}
	}
	out := map[string]datapath.Unforwarded{}
	for name, s := range st.services {
		if s.rec.retired() {
			continue
		}
		u, err := sumUnforwarded(m.ServiceUnforwarded, s.id)
		if err != nil {
			return nil, err
		}
		if u.Total() > 0 {
			out[name] = u
		}
	}
	return out, nil
}
