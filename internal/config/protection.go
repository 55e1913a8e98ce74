package config

import (
	"fmt"
	"net/netip"
	"slices"
)

// Limits bound a service's connections; 0 is no limit. Established connections are never
// touched: a limit only refuses new ones.
type Limits struct {
	// NewConnectionsPerSecond is the rate of new connections the service takes.
	NewConnectionsPerSecond int `yaml:"new_connections_per_second,omitempty" json:"new_connections_per_second,omitempty"`
	// NewConnectionsPerSourcePerSecond is that rate for one client address.
	NewConnectionsPerSourcePerSecond int `yaml:"new_connections_per_source_per_second,omitempty" json:"new_connections_per_source_per_second,omitempty"`
	// Connections is the most connections the service holds at once.
	Connections int `yaml:"connections,omitempty" json:"connections,omitempty"`
	// ConnectionsPerSource is the most connections one client address holds at once.
	ConnectionsPerSource int `yaml:"connections_per_source,omitempty" json:"connections_per_source,omitempty"`
}

// Bounds of the protection settings.
var (
	rateBounds        = bounds{1, 100_000_000}
	sourceRateBounds  = bounds{1, 1_000_000}
	concurrentBounds  = bounds{1, 100_000_000}
	perSourceBounds   = bounds{1, 1_000_000}
	limitFieldsBounds = map[string]bounds{
		"new_connections_per_second":            rateBounds,
		"new_connections_per_source_per_second": sourceRateBounds,
		"connections":                           concurrentBounds,
		"connections_per_source":                perSourceBounds,
	}
)

// MaxSourceList is the most prefixes of one source_allow or source_deny list.
const MaxSourceList = 65536

// fields lists the limits by key with their values.
func (l *Limits) fields() []struct {
	key   string
	value int
} {
	return []struct {
		key   string
		value int
	}{
		{"new_connections_per_second", l.NewConnectionsPerSecond},
		{"new_connections_per_source_per_second", l.NewConnectionsPerSourcePerSecond},
		{"connections", l.Connections},
		{"connections_per_source", l.ConnectionsPerSource},
	}
}

// protectionSupport says which datapaths program each protection key so far; a key a datapath
// cannot program yet is refused rather than ignored.
var protectionSupport = map[string][]Datapath{
	"syn_protection": {DatapathNFT, DatapathEBPF},
	"limits":         {DatapathEBPF, DatapathNFT},
	"source_allow":   {DatapathEBPF, DatapathNFT},
	"source_deny":    {DatapathEBPF, DatapathNFT},
}

// validateProtection checks syn_protection, the limits and the source lists of a service on a
// datapath whose VIP is IPv6 (is6) or not (when vipOK).
func (s *Service) validateProtection(at string, datapath Datapath, is6, vipOK bool, fail func(path, format string, args ...any)) {
	for _, key := range []struct {
		name string
		set  bool
	}{
		{"syn_protection", s.SYNProtection}, {"limits", s.Limits != nil},
		{"source_allow", len(s.SourceAllow) > 0}, {"source_deny", len(s.SourceDeny) > 0},
	} {
		if key.set && !slices.Contains(protectionSupport[key.name], datapath) {
			fail(at+"."+key.name, "is not programmed by datapath %s yet", datapath)
		}
	}
	if s.SYNProtection {
		switch {
		case s.Protocol != ProtocolTCP:
			fail(at+".syn_protection", "only applies to tcp services (SYN cookies are a TCP handshake)")
		case s.Mode.Direct():
			fail(at+".syn_protection", "cannot apply to mode %s: the backend's replies bypass the balancer, which would have to translate their sequence numbers (use nat or fullnat)", s.Mode)
		}
	}
	// An unset limit_action stays unset (drop): services without limits do not show one.
	s.LimitAction = oneOf(s.LimitAction, LimitActions, "", at+".limit_action", fail)
	if l := s.Limits; l != nil && datapath == DatapathNFT && s.Mode == ModeDSR {
		for _, f := range []struct {
			key string
			set bool
		}{{"connections", l.Connections != 0}, {"connections_per_source", l.ConnectionsPerSource != 0}} {
			if f.set {
				fail(at+".limits."+f.key, "cannot apply to mode dsr on datapath nft: dsr has no conntrack to count connections (use datapath: ebpf, or nat)")
			}
		}
	}
	if s.Limits != nil {
		for _, f := range s.Limits.fields() {
			if b := limitFieldsBounds[f.key]; f.value != 0 && !b.has(f.value) {
				fail(at+".limits."+f.key, "%d is out of range %s (0 or unset: no limit)", f.value, b)
			}
		}
	}
	for _, list := range []struct {
		key      string
		prefixes []Prefix
	}{{"source_allow", s.SourceAllow}, {"source_deny", s.SourceDeny}} {
		if len(list.prefixes) > MaxSourceList {
			fail(at+"."+list.key, "%d prefixes is more than %d: aggregate them (a /16 for 256 /24s)", len(list.prefixes), MaxSourceList)
			continue
		}
		for i, p := range list.prefixes {
			switch err := p.Err(); {
			case err != nil:
				fail(fmt.Sprintf("%s.%s[%d]", at, list.key, i), "%v", err)
			case vipOK && p.Addr().Is6() != is6:
				fail(fmt.Sprintf("%s.%s[%d]", at, list.key, i), "%s is not of the vip's address family: its clients cannot have it", p)
			}
		}
	}
}

// ParseSourcePrefix reads a source list entry: a prefix (10.0.0.0/8) or an address (a /32 or
// /128). Host bits are refused rather than masked: 10.0.0.1/8 is more likely a typo than a wish.
func ParseSourcePrefix(text string) (netip.Prefix, error) {
	if a, err := netip.ParseAddr(text); err == nil && a.Zone() == "" {
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(text)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a prefix like 192.0.2.0/24 or an address", text)
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("%q has host bits set: the prefix is %s", text, p.Masked())
	}
	if p.Addr().Is4In6() {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p, nil
}
