package ebpf

import (
	"fmt"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/plan"
)

// wireTunnels are the plan's tunnels as enum tunnel_kind.
var wireTunnels = map[config.Tunnel]sluiceTunnelKind{
	config.TunnelIPIP: sluiceTunnelKindTUNNEL_IPIP, config.TunnelGUE: sluiceTunnelKindTUNNEL_GUE,
}

// tunnelOf is the service_tunnels entry of a mode tunnel service of the plan: its kind, GUE port
// and outer source (zero: the route's preferred source).
func tunnelOf(s *plan.Service) sluiceTunnel {
	t := sluiceTunnel{Kind: wireTunnels[s.Tunnel.Kind], GuePort: wirePort(s.Tunnel.GUEPort)}
	if s.Tunnel.Source.IsValid() {
		t.Src, _ = wireAddr(s.Tunnel.Source)
	}
	return t
}

// tunnel writes a tunnel service's entry in service_tunnels when it does not hold it yet (and
// zeroes its counters when it becomes a tunnel): before its vips entries, which tell the program
// to read it. A service that stops being a tunnel keeps
// the entry, which the program no longer reads once the vips entries say so.
func (s *syncer) tunnel(cur *serviceState, ps *plan.Service) error {
	if ps.Mode != config.ModeTunnel {
		return nil
	}
	want := tunnelOf(ps)
	if want == cur.tunnel {
		return nil
	}
	if cur.tunnel == (sluiceTunnel{}) { // its counters start from 0, not the id's last service's
		if err := s.w.put(s.m.TunnelStats, cur.id, []sluiceTunnelCounts{}); err != nil {
			return err
		}
	}
	if err := s.w.put(s.m.ServiceTunnels, cur.id, want); err != nil {
		return err
	}
	cur.tunnel = want
	return nil
}

// tunnelCountsOf sums the per-CPU tunnel_stats values of a service.
func tunnelCountsOf(perCPU []sluiceTunnelCounts) datapath.TunnelCounts {
	var c datapath.TunnelCounts
	for _, v := range perCPU {
		c.Encapsulated += v.Encapsulated
		c.TooBig += v.TooBig
		c.NoSource += v.NoSource
	}
	return c
}

// tunnelCounts reads a tunnel service's counters (none for the other modes, or pins of a version
// before tunnels).
func tunnelCounts(m *kernelMaps, rec *serviceRecord, id uint32) (datapath.TunnelCounts, error) {
	if rec.Mode != sluiceModeMODE_TUNNEL || m.TunnelStats == nil {
		return datapath.TunnelCounts{}, nil
	}
	var perCPU []sluiceTunnelCounts
	if err := m.TunnelStats.Lookup(id, &perCPU); err != nil {
		return datapath.TunnelCounts{}, fmt.Errorf("tunnel counters of service %d: %w", id, err)
	}
	return tunnelCountsOf(perCPU), nil
}
