package config

import (
	"net/netip"
	"slices"
)

// validateFullNATSource checks a service's fullnat_source (at is its path), once the mode is
// defaulted and the backends parsed: an address of the VIP's family that is none of the config's
// VIPs and none of the service's backends or sorry servers, which the balancer would then send
// flows from and to at once. It stores the address unmapped.
func (s *Service) validateFullNATSource(at string, vip netip.Addr, vipOK bool, vips vipOwners, fail func(path, format string, args ...any)) {
	if s.FullNATSource.IsZero() {
		return
	}
	if s.Mode != ModeFullNAT {
		fail(at, "only applies to mode fullnat, not %s (nat keeps the client's address, dsr does not translate)", s.Mode)
		return
	}
	src, err := parseIP(s.FullNATSource)
	switch {
	case err != nil:
		fail(at, "%v", err)
	case vipOK && src == vip:
		fail(at, "%s is the service's own vip: the backends' replies would look like new flows to it", src)
	case vips.has(src):
		fail(at, "%s is the vip of %s: the backends' replies would look like flows to it", src, vips.name(src))
	case vipOK && src.Is4() != vip.Is4():
		fail(at, "%s and vip %s are of different address families", src, vip)
	case s.isBackend(src):
		fail(at, "%s is a backend of the service: it cannot be the source the backends see", src)
	default:
		s.FullNATSource.Addr = src
	}
}

// isBackend tells whether a is the address of one of the service's backends or sorry servers.
func (s *Service) isBackend(a netip.Addr) bool {
	is := func(b Backend) bool { return b.Address.Addr.Unmap() == a }
	return slices.ContainsFunc(s.Backends, is) || slices.ContainsFunc(s.SorryServers, is)
}
