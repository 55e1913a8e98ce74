package ebpf

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/plan"
)

// Fullnat flows leave the balancer from its own address with a source port of this range. The
// range lies below Linux's default ephemeral range (32768-60999), so that no connection the
// balancer makes itself (health checks to the same backends) can have the 5-tuple of a fullnat
// flow's replies.
const (
	fullnatPortLow  = 10000
	fullnatPortHigh = 32767
)

// globalsFor computes config[0]: the fullnat source ports, and per IP version the source address
// of the route towards the first backend of the first fullnat service without a fullnat_source
// (services by name, backends by ID). One address per IP version: backends reached through
// interfaces with other addresses need a route whose preferred source (ip route ... src) is that
// one, or the service a fullnat_source.
func globalsFor(p *plan.Plan) (sluiceGlobals, error) {
	g := sluiceGlobals{PortLow: fullnatPortLow, PortHigh: fullnatPortHigh}
	var have4, have6 bool
	for _, s := range p.Services {
		if serviceSourceOf(&s) == sluiceServiceSourceSOURCE_OWN {
			continue
		}
		if s.Mode != config.ModeFullNAT || len(s.Backends) == 0 || (s.VIP.Is4() && have4) || (s.VIP.Is6() && have6) {
			continue
		}
		src, err := sourceTowards(s.Backends[0].Addr)
		if err != nil {
			return g, fmt.Errorf("service %s: %w", s.Name, err)
		}
		if s.VIP.Is4() {
			g.Snat4, have4 = src.As4(), true
		} else {
			g.Snat6, have6 = src.As16(), true
		}
	}
	return g, nil
}

// sourceTowards is the address the kernel would send from to a, from the routing table.
func sourceTowards(a netip.Addr) (netip.Addr, error) {
	routes, err := netlink.RouteGet(a.AsSlice())
	if err != nil {
		return netip.Addr{}, fmt.Errorf("no route to backend %s: %w", a, err)
	}
	if len(routes) == 0 {
		return netip.Addr{}, fmt.Errorf("no route to backend %s", a)
	}
	src, ok := netip.AddrFromSlice(routes[0].Src)
	if !ok {
		return netip.Addr{}, fmt.Errorf("the route to backend %s has no source address", a)
	}
	return src.Unmap(), nil
}

// globals writes config[0] when it changed. A source address that the plan no longer needs stays
// while a fullnat service programmed before (retired now, or by this plan) of its IP version
// may still have flows translated to it.
func (s *syncer) globals(p *plan.Plan) error {
	g, err := globalsFor(p)
	if err != nil {
		return err
	}
	for _, svc := range s.st.services {
		if svc.rec.Mode == wireModes[config.ModeFullNAT] {
			if svc.rec.Family == unix.AF_INET && g.Snat4 == [4]byte{} {
				g.Snat4 = s.st.globals.Snat4
			} else if svc.rec.Family == unix.AF_INET6 && g.Snat6 == [16]byte{} {
				g.Snat6 = s.st.globals.Snat6
			}
		}
	}
	if s.events {
		g.FlowEvents = 1
	}
	if g == s.st.globals {
		return nil
	}
	if err := s.w.put(s.m.Config, uint32(0), g); err != nil {
		return err
	}
	s.st.globals = g
	return nil
}

// serviceSourceOf is where a service of the plan takes its fullnat source from: its own
// (fullnat_source) or the node's.
func serviceSourceOf(s *plan.Service) sluiceServiceSource {
	if s.Mode == config.ModeFullNAT && s.FullNATSource.IsValid() {
		return sluiceServiceSourceSOURCE_OWN
	}
	return sluiceServiceSourceSOURCE_NODE
}

// ownSourceOf is the service_sources entry of a service with its own fullnat source: the address
// and the port range the node's fullnat uses.
func ownSourceOf(s *plan.Service) sluiceGlobals {
	g := sluiceGlobals{PortLow: fullnatPortLow, PortHigh: fullnatPortHigh}
	if a := s.FullNATSource; a.Is4() {
		g.Snat4 = a.As4()
	} else {
		g.Snat6 = a.As16()
	}
	return g
}

// natSource writes a service's entry in service_sources when it has its own fullnat source that
// the entry does not hold yet: before its vips entries, which tell the program to read it. A
// service that drops its own keeps the entry, which the program no longer reads once the vips
// entries say so; the next service given its id with one of its own overwrites it.
func (s *syncer) natSource(cur *serviceState, ps *plan.Service) error {
	if serviceSourceOf(ps) != sluiceServiceSourceSOURCE_OWN {
		return nil
	}
	want := ownSourceOf(ps)
	if want == cur.source {
		return nil
	}
	if err := s.w.put(s.m.ServiceSources, cur.id, want); err != nil {
		return err
	}
	cur.source = want
	return nil
}

// natSettings is the fullnat source and port range the program uses for a service: its own
// (own, from service_sources) or the node's (config).
func natSettings(node, own sluiceGlobals, source sluiceServiceSource) sluiceGlobals {
	if source == sluiceServiceSourceSOURCE_OWN {
		return own
	}
	return node
}
