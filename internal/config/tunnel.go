package config

import (
	"fmt"
	"net/netip"
)

// Tunnel is the encapsulation of a mode tunnel service: IP in IP, or GUE (UDP).
type Tunnel string

// The tunnels.
const (
	TunnelIPIP    Tunnel = "ipip"
	TunnelGUE     Tunnel = "gue"
	DefaultTunnel        = TunnelIPIP
)

// Tunnels are the allowed tunnels.
var Tunnels = []Tunnel{TunnelIPIP, TunnelGUE}

// DefaultGUEPort is the UDP port GUE packets are sent to (the port `ip fou add` and `sluice
// decap` listen on by default).
const DefaultGUEPort = 6080

// gueBounds are the ports a GUE tunnel may be sent to.
var gueBounds = bounds{1, 65535}

// Direct tells whether a mode sends the client's packets to the backends unchanged, whose replies
// then bypass the balancer: dsr (a new destination MAC) and tunnel (an outer IP header).
func (m Mode) Direct() bool { return m == ModeDSR || m == ModeTunnel }

// GUEPortOrDefault is the GUE destination port of a tunnel service.
func (s *Service) GUEPortOrDefault() int {
	if s.GUEPort == 0 {
		return DefaultGUEPort
	}
	return s.GUEPort
}

// validateTunnel checks a service's tunnel keys (at is its path), once the mode is defaulted and
// the VIP and backends parsed: tunnel, gue_port and tunnel_source apply to mode tunnel only, which
// only the ebpf datapath can encapsulate. It defaults tunnel and stores tunnel_source unmapped.
func (s *Service) validateTunnel(at string, vip netip.Addr, vipOK bool, vips vipOwners, datapath Datapath, fail func(path, format string, args ...any)) {
	if s.Mode != ModeTunnel {
		for _, k := range []struct {
			key string
			set bool
		}{{"tunnel", s.Tunnel != ""}, {"gue_port", s.GUEPort != 0}, {"tunnel_source", !s.TunnelSource.IsZero()}} {
			if k.set {
				fail(at+"."+k.key, "only applies to mode tunnel, not %s", s.Mode)
			}
		}
		return
	}
	if datapath != DatapathEBPF {
		fail(at+".mode", "tunnel needs datapath ebpf: nftables cannot add an outer IP header (the kernel's tunnel devices would need one per backend); use datapath: ebpf, or mode dsr with the backends on the balancer's segment")
	}
	s.Tunnel = oneOf(s.Tunnel, Tunnels, DefaultTunnel, at+".tunnel", fail)
	if s.GUEPort != 0 && s.Tunnel != TunnelGUE {
		fail(at+".gue_port", "only applies to tunnel gue, not %s", s.Tunnel)
	} else if s.GUEPort != 0 && !gueBounds.has(s.GUEPort) {
		fail(at+".gue_port", "%d is not a port in %s", s.GUEPort, gueBounds)
	}
	outer := s.tunnelFamily(at, fail)
	if s.TunnelSource.IsZero() {
		return
	}
	src, err := parseIP(s.TunnelSource)
	switch {
	case err != nil:
		fail(at+".tunnel_source", "%v", err)
	case vipOK && src == vip, vips.has(src):
		fail(at+".tunnel_source", "%s is a vip: the outer source must be an address of the balancer the backends can reply to", src)
	case outer.addr.IsValid() && src.Is4() != outer.addr.Is4():
		fail(at+".tunnel_source", "%s and %s %s are of different address families (the outer header is of the backends' family)", src, outer.path, outer.addr)
	case !outer.addr.IsValid() && vipOK && src.Is4() != vip.Is4():
		fail(at+".tunnel_source", "%s and vip %s are of different address families (the outer header is of the backends' family)", src, vip)
	case s.isBackend(src):
		fail(at+".tunnel_source", "%s is a backend of the service", src)
	default:
		s.TunnelSource.Addr = src
	}
}

// tunnelBackend is a tunnel service's first backend (or sorry server) and where it is.
type tunnelBackend struct {
	addr netip.Addr
	path string
}

// tunnelFamily checks that a tunnel service's backends and sorry servers are of one address
// family, the outer header's, which may differ from the VIP's (IPv6 in IPv4, IPv4 in IPv6): it
// returns the first of them (none when no address parses; validateBackends reports those).
func (s *Service) tunnelFamily(at string, fail func(path, format string, args ...any)) tunnelBackend {
	var first tunnelBackend
	for _, l := range []struct {
		key  string
		list []Backend
	}{{"backends", s.Backends}, {"sorry_servers", s.SorryServers}} {
		for j := range l.list {
			a, err := parseIP(l.list[j].Address)
			switch {
			case err != nil:
			case !first.addr.IsValid():
				first = tunnelBackend{a, fmt.Sprintf("%s[%d]", l.key, j)}
			case a.Is4() != first.addr.Is4():
				fail(fmt.Sprintf("%s.%s[%d].address", at, l.key, j), "%s and %s %s are of different address families: a tunnel service's backends are of one family, the outer header's", a, first.path, first.addr)
			}
		}
	}
	return first
}
