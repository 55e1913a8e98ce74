package config

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// BGP makes the node announce the VIPs of its services that can take new flows to routers, which
// spread the flows over every node announcing a VIP (ECMP).
type BGP struct {
	// ASN is the node's autonomous system number.
	ASN uint32 `yaml:"asn" json:"asn"`
	// RouterID is the node's BGP identifier (IPv4); empty: the node's first IPv4 address.
	RouterID IP `yaml:"router_id,omitempty" json:"router_id,omitzero"`
	// ListenPort is the port the node accepts BGP sessions on; nil or -1: it only dials its peers.
	ListenPort *int `yaml:"listen_port,omitempty" json:"listen_port,omitempty"`
	// ShutdownGrace is how long the daemon keeps forwarding after it withdrew its VIPs on
	// shutdown, for the routers to move the flows to other nodes; default 5s.
	ShutdownGrace Duration `yaml:"shutdown_grace,omitempty" json:"shutdown_grace,omitzero"`
	// Peers are the routers the node announces to.
	Peers []BGPPeer `yaml:"peers" json:"peers"`
	// FullNATSources are every fleet node's fullnat source address (services' fullnat_source).
	// The node announces, as host routes, those its own fullnat services translate to, like its
	// VIPs, and the others as backup routes (less preferred: MED 100 and local_pref 50), so that
	// the routers send a node's replies to the nodes that hold its flows (sync) once it is gone.
	FullNATSources []IP `yaml:"fullnat_sources,omitempty" json:"fullnat_sources,omitempty"`
}

// Backup route attributes of the fullnat sources a node announces for its peers: a router
// prefers the owner's route (no MED, local_pref 100) while it is there.
const (
	BackupSourceMED       = 100
	BackupSourceLocalPref = 50
	// MaxFullNATSources bounds bgp.fullnat_sources: one per node of a fleet.
	MaxFullNATSources = 64
)

// BGPPeer is one router the node holds a BGP session with.
type BGPPeer struct {
	Address IP `yaml:"address" json:"address"`
	// Port is the peer's BGP port; 0: 179.
	Port int    `yaml:"port,omitempty" json:"port,omitempty"`
	ASN  uint32 `yaml:"asn" json:"asn"`
	// HoldTime is the BGP hold time offered (keepalives every third of it); default 90s.
	HoldTime Duration `yaml:"hold_time,omitempty" json:"hold_time,omitzero"`
	// Password turns on TCP MD5 signatures (RFC 2385) with this key.
	Password string `yaml:"password,omitempty" json:"password,omitempty"`
	// NextHop is the next hop announced to this peer; empty: the session's own address.
	NextHop IP `yaml:"next_hop,omitempty" json:"next_hop,omitzero"`
	// BFD runs a single-hop BFD session (RFC 5880, 5881) beside the BGP session: when it fails
	// the BGP session is brought down at once, and the router (running BFD too) drops the
	// node's routes within the detection time instead of the hold time.
	BFD bool `yaml:"bfd,omitempty" json:"bfd,omitempty"`
	// BFDInterval is both the desired minimum transmit and the required minimum receive
	// interval of the BFD session; default 100ms.
	BFDInterval Duration `yaml:"bfd_interval,omitempty" json:"bfd_interval,omitzero"`
	// BFDMultiplier is the BFD detect multiplier: the session fails after this many intervals
	// without a packet; 0: 3.
	BFDMultiplier int `yaml:"bfd_multiplier,omitempty" json:"bfd_multiplier,omitempty"`
	// PathAttributes are added to every announcement to this peer.
	PathAttributes `yaml:",inline"`
}

// PathAttributes are optional BGP path attributes of announcements.
type PathAttributes struct {
	// Communities are standard communities, "ASN:VALUE" (each 0-65535).
	Communities []string `yaml:"communities,omitempty" json:"communities,omitempty"`
	// MED is the multi-exit discriminator.
	MED *uint32 `yaml:"med,omitempty" json:"med,omitempty"`
	// LocalPref is the local preference, sent to iBGP peers only.
	LocalPref *uint32 `yaml:"local_pref,omitempty" json:"local_pref,omitempty"`
}

// Defaults and bounds of the bgp section.
const (
	DefaultHoldTime      = 90 * time.Second
	DefaultShutdownGrace = 5 * time.Second
	MaxShutdownGrace     = 10 * time.Minute
	// MaxBGPPeers bounds the sessions one node holds: each is a TCP session, timers and a copy
	// of the announcements.
	MaxBGPPeers = 64
	// MinHoldTime and MaxHoldTime are RFC 4271's bounds of a non-zero hold time.
	MinHoldTime = 3 * time.Second
	MaxHoldTime = 65535 * time.Second
	// maxMD5KeyLen is the kernel's TCP_MD5SIG_MAXKEYLEN.
	maxMD5KeyLen = 80
	// maxCommunities bounds the communities of one attribute set.
	maxCommunities = 32
	// DefaultBFDInterval and DefaultBFDMultiplier detect a dead peer in 300ms.
	DefaultBFDInterval   = 100 * time.Millisecond
	DefaultBFDMultiplier = 3
	// MinBFDInterval and MaxBFDInterval bound bfd_interval: below 10ms a busy node's scheduler
	// misses packets and the session flaps; above 10s BFD detects no sooner than BGP.
	MinBFDInterval = 10 * time.Millisecond
	MaxBFDInterval = 10 * time.Second
)

// bfdMultiplierBounds are the detect multipliers BFD's one-byte field holds, 0 excluded.
var bfdMultiplierBounds = bounds{1, 255}

// NoListen is the listen_port that keeps the node from accepting sessions.
const NoListen = -1

// ListenPortOrDefault is the listen port, NoListen when unset.
func (b *BGP) ListenPortOrDefault() int {
	if b.ListenPort == nil {
		return NoListen
	}
	return *b.ListenPort
}

// ShutdownGraceOrDefault is the parsed shutdown_grace.
func (b *BGP) ShutdownGraceOrDefault() time.Duration {
	return b.ShutdownGrace.Or(DefaultShutdownGrace)
}

// HoldTimeOrDefault is the parsed hold_time.
func (p *BGPPeer) HoldTimeOrDefault() time.Duration { return p.HoldTime.Or(DefaultHoldTime) }

// BFDIntervalOrDefault is the parsed bfd_interval.
func (p *BGPPeer) BFDIntervalOrDefault() time.Duration {
	return p.BFDInterval.Or(DefaultBFDInterval)
}

// BFDMultiplierOrDefault is bfd_multiplier, DefaultBFDMultiplier when unset.
func (p *BGPPeer) BFDMultiplierOrDefault() int {
	if p.BFDMultiplier == 0 {
		return DefaultBFDMultiplier
	}
	return p.BFDMultiplier
}

// ParseCommunity reads a standard community written "ASN:VALUE".
func ParseCommunity(s string) (uint32, error) {
	high, low, ok := strings.Cut(s, ":")
	h, herr := strconv.ParseUint(high, 10, 16)
	l, lerr := strconv.ParseUint(low, 10, 16)
	if !ok || herr != nil || lerr != nil {
		return 0, fmt.Errorf("%q is not a community ASN:VALUE (each 0-65535)", s)
	}
	return uint32(h)<<16 | uint32(l), nil
}

// validateBGP checks the bgp section and fills in its canonical forms.
func (c *Config) validateBGP(fail func(path, format string, args ...any)) {
	b := c.BGP
	if b == nil {
		return
	}
	if !validASN(b.ASN) {
		fail("bgp.asn", "%s", asnRule(b.ASN))
	}
	if !b.RouterID.IsZero() {
		if a := b.RouterID; !a.Is4() || a.IsUnspecified() {
			fail("bgp.router_id", "%q is not an IPv4 address (a BGP identifier is one)", b.RouterID)
		}
	}
	if p := b.ListenPort; p != nil && *p != NoListen && !portBounds.has(*p) {
		fail("bgp.listen_port", "%d is not a port in %s, or %d to only dial the peers", *p, portBounds, NoListen)
	}
	if g := b.ShutdownGrace; !g.IsZero() && !g.within(0, MaxShutdownGrace, 1) {
		fail("bgp.shutdown_grace", "%q is not a duration between 0s and %s (like 5s)", g, MaxShutdownGrace)
	}
	switch {
	case len(b.Peers) == 0:
		fail("bgp.peers", "no peers: list the routers to announce to, or remove the bgp section")
	case len(b.Peers) > MaxBGPPeers:
		fail("bgp.peers", "%d peers is more than %d: peer with route reflectors instead of every router", len(b.Peers), MaxBGPPeers)
		return
	}
	seen := map[netip.Addr][]int{}
	for i := range b.Peers {
		p := &b.Peers[i]
		at := fmt.Sprintf("bgp.peers[%d]", i)
		addr, err := peerAddress(p.Address)
		if err != nil {
			fail(at+".address", "%v", err)
		} else {
			p.Address.Addr = addr
			seen[addr] = append(seen[addr], i)
		}
		if !anyPortBounds.has(p.Port) {
			fail(at+".port", "%d is not a port in %s", p.Port, portBounds)
		}
		if !validASN(p.ASN) {
			fail(at+".asn", "%s", asnRule(p.ASN))
		}
		switch h := p.HoldTime; {
		case h.IsZero() || h.within(MinHoldTime, MaxHoldTime, time.Second):
		case h.IsValid() && h.Duration == 0:
			fail(at+".hold_time", "%q: the BGP speaker (GoBGP) cannot offer a hold time of 0 (no keepalives): give whole seconds between %s and %s, or leave it out for %s", h, MinHoldTime, MaxHoldTime, DefaultHoldTime)
		default:
			fail(at+".hold_time", "%q is not whole seconds between %s and %s (like 9s)", h, MinHoldTime, MaxHoldTime)
		}
		if len(p.Password) > maxMD5KeyLen {
			fail(at+".password", "%d bytes is longer than the %d a TCP MD5 key can hold", len(p.Password), maxMD5KeyLen)
		}
		if !p.NextHop.IsZero() {
			nh, err := parseIP(p.NextHop)
			switch {
			case err != nil:
				fail(at+".next_hop", "%v", err)
			case addr.IsValid() && nh.Is4() != addr.Is4():
				fail(at+".next_hop", "%s and the peer %s are of different address families (a peer carries its own family)", nh, p.Address)
			default:
				p.NextHop.Addr = nh
			}
		}
		p.validateBFD(at, fail)
		p.PathAttributes.validate(at, fail)
	}
	failDuplicatePeers(b.Peers, seen, fail)
	c.validateFullNATSources(fail)
}

// validateFullNATSources checks bgp.fullnat_sources: unicast addresses, each once, and every
// fullnat service's fullnat_source among them.
func (c *Config) validateFullNATSources(fail func(path, format string, args ...any)) {
	sources := c.BGP.FullNATSources
	if len(sources) == 0 {
		return
	}
	if len(sources) > MaxFullNATSources {
		fail("bgp.fullnat_sources", "%d sources is more than %d: one per node of the fleet", len(sources), MaxFullNATSources)
		return
	}
	listed := map[netip.Addr]int{}
	for i := range sources {
		at := fmt.Sprintf("bgp.fullnat_sources[%d]", i)
		a, err := peerAddress(sources[i])
		if err != nil {
			fail(at, "%v", err)
			continue
		}
		if first, dup := listed[a]; dup {
			fail(at, "%s is listed twice (also at bgp.fullnat_sources[%d])", a, first)
			continue
		}
		sources[i].Addr, listed[a] = a, i
	}
	for i, s := range c.Services {
		if s.Mode != ModeFullNAT || s.FullNATSource.IsZero() {
			continue
		}
		if _, ok := listed[s.FullNATSource.Unmap()]; !ok {
			fail(fmt.Sprintf("services[%d].fullnat_source", i), "%s is not in bgp.fullnat_sources, which lists every node's: add it there", s.FullNATSource)
		}
	}
}

// OwnFullNATSources are the bgp.fullnat_sources this node's fullnat services translate to.
func (c *Config) OwnFullNATSources() map[netip.Addr]bool {
	own := map[netip.Addr]bool{}
	for _, s := range c.Services {
		if s.Mode == ModeFullNAT && !s.FullNATSource.IsZero() {
			own[s.FullNATSource.Unmap()] = true
		}
	}
	return own
}

// validateBFD checks the peer's BFD timers, which only a peer with bfd: true may set.
func (p *BGPPeer) validateBFD(at string, fail func(path, format string, args ...any)) {
	if i := p.BFDInterval; !i.IsZero() && !i.within(MinBFDInterval, MaxBFDInterval, time.Millisecond) {
		fail(at+".bfd_interval", "%q is not whole milliseconds between %s and %s (like 100ms)", i, MinBFDInterval, MaxBFDInterval)
	}
	if p.BFDMultiplier != 0 && !bfdMultiplierBounds.has(p.BFDMultiplier) {
		fail(at+".bfd_multiplier", "%d is not a detect multiplier in %s", p.BFDMultiplier, bfdMultiplierBounds)
	}
	if p.BFD {
		return
	}
	if !p.BFDInterval.IsZero() {
		fail(at+".bfd_interval", "set without bfd: true, which turns BFD on for this peer")
	}
	if p.BFDMultiplier != 0 {
		fail(at+".bfd_multiplier", "set without bfd: true, which turns BFD on for this peer")
	}
}

// peerAddress checks a peer's address: a unicast address a session can be dialled to, without
// a zone (an IPv6 link-local address needs one, so it cannot be a peer). It returns it unmapped.
func peerAddress(ip IP) (netip.Addr, error) {
	a := ip.Unmap()
	switch {
	case !a.IsValid() || a.Zone() != "":
		return netip.Addr{}, fmt.Errorf("%q is not a unicast IP address", ip)
	case a.IsUnspecified() || a.IsMulticast() || a == limitedBroadcast || a.IsLinkLocalUnicast() && a.Is6():
		return netip.Addr{}, fmt.Errorf("%q cannot be a BGP peer (unspecified, multicast, broadcast or IPv6 link-local)", ip)
	}
	return a, nil
}

// failDuplicatePeers reports every peer address listed more than once (seen: the entries of each
// address), at each of its entries so that the errors name the line of each: a node holds one
// session per neighbour address, whatever the port.
func failDuplicatePeers(peers []BGPPeer, seen map[netip.Addr][]int, fail func(path, format string, args ...any)) {
	for i := range peers {
		at := seen[peers[i].Address.Addr]
		if len(at) < 2 || !slices.Contains(at, i) {
			continue
		}
		var others []string
		for _, j := range at {
			if j != i {
				others = append(others, fmt.Sprintf("bgp.peers[%d]", j))
			}
		}
		fail(fmt.Sprintf("bgp.peers[%d].address", i), "%s is listed again as %s: a node holds one session per peer address, whatever the port", peers[i].Address, strings.Join(others, ", "))
	}
}

// validate checks the communities.
func (a *PathAttributes) validate(at string, fail func(path, format string, args ...any)) {
	if len(a.Communities) > maxCommunities {
		fail(at+".communities", "%d communities is more than %d", len(a.Communities), maxCommunities)
		return
	}
	for i, text := range a.Communities {
		if _, err := ParseCommunity(text); err != nil {
			fail(fmt.Sprintf("%s.communities[%d]", at, i), "%v", err)
		}
	}
}

// validateServiceBGP checks the services' path attributes: the services of one VIP share its
// announcement, so they must agree on them.
func (c *Config) validateServiceBGP(fail func(path, format string, args ...any)) {
	first := map[IP]int{}
	for i := range c.Services {
		s := &c.Services[i]
		if s.BGP == nil {
			continue
		}
		at := fmt.Sprintf("services[%d].bgp", i)
		if c.BGP == nil {
			fail(at, "there is no bgp section to announce with")
			continue
		}
		s.BGP.validate(at, fail)
		if j, ok := first[s.VIP]; ok && !c.Services[j].BGP.equal(s.BGP) {
			fail(at, "differs from services[%d].bgp (%s): the services of vip %s share one announcement", j, c.Services[j].Name, s.VIP)
			continue
		}
		first[s.VIP] = i
	}
	for i := range c.Services {
		s := &c.Services[i]
		if j, ok := first[s.VIP]; ok && s.BGP == nil {
			fail(fmt.Sprintf("services[%d].bgp", i), "missing, while services[%d] (%s) on vip %s sets it: the services of a vip share one announcement", j, c.Services[j].Name, s.VIP)
		}
	}
}

func (a *PathAttributes) equal(b *PathAttributes) bool {
	same := func(x, y *uint32) bool { return x == nil && y == nil || x != nil && y != nil && *x == *y }
	return slices.Equal(a.Communities, b.Communities) && same(a.MED, b.MED) && same(a.LocalPref, b.LocalPref)
}

func (a *PathAttributes) clone() *PathAttributes {
	if a == nil {
		return nil
	}
	out := *a
	out.Communities = slices.Clone(a.Communities)
	if a.MED != nil {
		out.MED = &[]uint32{*a.MED}[0]
	}
	if a.LocalPref != nil {
		out.LocalPref = &[]uint32{*a.LocalPref}[0]
	}
	return &out
}

// Clone returns a deep copy of b (nil for nil).
func (b *BGP) Clone() *BGP {
	if b == nil {
		return nil
	}
	out := *b
	if b.ListenPort != nil {
		out.ListenPort = &[]int{*b.ListenPort}[0]
	}
	out.Peers = slices.Clone(b.Peers)
	for i := range out.Peers {
		out.Peers[i].PathAttributes = *b.Peers[i].PathAttributes.clone()
	}
	out.FullNATSources = slices.Clone(b.FullNATSources)
	return &out
}

// validASN is true for an AS number a BGP speaker may have: not 0, not AS_TRANS (23456), not the
// reserved 65535 and 4294967295.
func validASN(n uint32) bool { return n != 0 && n != 23456 && n != 65535 && n != 4294967295 }

func asnRule(n uint32) string {
	if n == 0 {
		return "missing: the AS number (1-4294967294)"
	}
	return fmt.Sprintf("%d is reserved (0, 23456, 65535 and 4294967295 are)", n)
}

// Warnings lists what the config allows but may not do what the operator means: a nat service
// announced over BGP needs its replies to come back through the node that translated the
// request, which ECMP over several nodes does not give.
func (c *Config) Warnings() []string {
	if c.BGP == nil {
		return nil
	}
	var out []string
	for i, s := range c.Services {
		if s.Mode == ModeNAT {
			out = append(out, fmt.Sprintf("services[%d].mode: nat with bgp: the backends must route replies back through the node that translated the request; with several nodes behind ECMP use dsr or fullnat (docs/scale-out.md)", i))
		}
	}
	if len(c.BGP.FullNATSources) > 0 && c.Sync == nil {
		out = append(out, "bgp.fullnat_sources without a sync section: the backup routes bring a gone node's replies to nodes that do not hold its flows (docs/scale-out.md)")
	}
	return out
}
