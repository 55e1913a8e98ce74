package bgp

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"
)

// Community is a standard BGP community (RFC 1997), written "ASN:VALUE" (each 0..65535).
type Community uint32

// String writes the community as "ASN:VALUE".
func (c Community) String() string {
	return fmt.Sprintf("%d:%d", uint32(c)>>16, uint32(c)&0xffff)
}

// Attributes are optional path attributes.
type Attributes struct {
	Communities []Community
	MED         *uint32
	LocalPref   *uint32 // iBGP only (a peer with the same ASN); ignored for eBGP peers
}

func (a Attributes) equal(b Attributes) bool {
	return slices.Equal(a.Communities, b.Communities) && ptrEqual(a.MED, b.MED) && ptrEqual(a.LocalPref, b.LocalPref)
}

func ptrEqual(a, b *uint32) bool {
	return a == b || a != nil && b != nil && *a == *b
}

// Announcement is one prefix the node announces (a VIP as /32 or /128).
type Announcement struct {
	Prefix netip.Prefix
	Attributes
}

// Peer is one BGP neighbour.
type Peer struct {
	Address    netip.Addr
	Port       uint16 // 0: 179
	ASN        uint32
	HoldTime   time.Duration // 0: 90s; keepalive = hold/3
	Password   string        // TCP MD5 (RFC 2385); empty: none
	NextHop    netip.Addr    // zero: the session's local address
	BFD        *BFD          // nil: no BFD session with this peer
	Attributes               // added to every path sent to this peer (communities appended, med/local_pref override the announcement's)
}

// BFD is the timers of a single-hop BFD session (RFC 5880, 5881) run beside a peer's BGP
// session: when it fails, the BGP session is reset at once.
type BFD struct {
	Interval   time.Duration // desired min tx and required min rx interval; 0: 100ms
	Multiplier uint8         // detect multiplier; 0: 3
}

// The BFD defaults and the bounds of its interval.
const (
	defaultBFDInterval   = 100 * time.Millisecond
	defaultBFDMultiplier = 3
	minBFDInterval       = time.Millisecond
	maxBFDInterval       = time.Minute
)

// bfdEqual reports whether two peers' BFD settings are the same (both off, or the same timers).
func bfdEqual(a, b *BFD) bool {
	return a == b || a != nil && b != nil && *a == *b
}

// Config is the speaker's identity and neighbours.
type Config struct {
	ASN        uint32
	RouterID   netip.Addr // IPv4
	ListenPort int32      // -1: do not listen, only dial peers; 0: 179
	Peers      []Peer
}

const (
	bgpPort         = 179
	defaultHoldTime = 90 * time.Second
	maxPasswordLen  = 80 // TCP_MD5SIG_MAXKEYLEN
)

// limitedBroadcast is 255.255.255.255, no peer's address.
var limitedBroadcast = netip.AddrFrom4([4]byte{255, 255, 255, 255})

// sessionEqual reports whether two peers would run the same session: a difference here
// needs the session restarted, anything else is applied by policy.
func (p Peer) sessionEqual(q Peer) bool {
	return p.Address == q.Address && p.Port == q.Port && p.ASN == q.ASN &&
		p.HoldTime == q.HoldTime && p.Password == q.Password && bfdEqual(p.BFD, q.BFD)
}

// exportEqual reports whether the same export policy serves both peers.
func (p Peer) exportEqual(q Peer) bool {
	return p.NextHop == q.NextHop && p.Attributes.equal(q.Attributes)
}

// normalize checks a Config and returns it with defaults filled in and peers sorted by
// address. Errors name the field.
func (c Config) normalize() (Config, error) {
	if c.ASN == 0 {
		return Config{}, errors.New("asn: must not be 0")
	}
	if !c.RouterID.Is4() || c.RouterID.IsUnspecified() {
		return Config{}, fmt.Errorf("router_id: %v is not a usable IPv4 address", c.RouterID)
	}
	if c.ListenPort < -1 || c.ListenPort > 65535 {
		return Config{}, fmt.Errorf("listen_port: %d is not -1 or 0..65535", c.ListenPort)
	}
	if c.ListenPort == 0 {
		c.ListenPort = bgpPort
	}
	peers := make([]Peer, len(c.Peers))
	seen := make(map[netip.Addr]bool, len(c.Peers))
	for i, p := range c.Peers {
		n, err := p.normalize()
		if err != nil {
			return Config{}, fmt.Errorf("peers[%d]: %w", i, err)
		}
		if seen[n.Address] {
			return Config{}, fmt.Errorf("peers[%d]: address: %v is listed twice", i, n.Address)
		}
		seen[n.Address] = true
		peers[i] = n
	}
	slices.SortFunc(peers, func(a, b Peer) int { return a.Address.Compare(b.Address) })
	c.Peers = peers
	return c, nil
}

func (p Peer) normalize() (Peer, error) {
	p.Address = p.Address.Unmap()
	if !p.Address.IsValid() || p.Address.IsUnspecified() || p.Address.IsMulticast() || p.Address == limitedBroadcast || p.Address.Zone() != "" {
		return Peer{}, fmt.Errorf("address: %v is not a unicast IP address without zone", p.Address)
	}
	if p.ASN == 0 {
		return Peer{}, errors.New("asn: must not be 0")
	}
	if p.Port == 0 {
		p.Port = bgpPort
	}
	switch {
	case p.HoldTime == 0:
		p.HoldTime = defaultHoldTime
	case p.HoldTime < 3*time.Second || p.HoldTime > 65535*time.Second || p.HoldTime%time.Second != 0:
		return Peer{}, fmt.Errorf("hold_time: %v is not whole seconds in 3s..65535s", p.HoldTime)
	}
	if len(p.Password) > maxPasswordLen {
		return Peer{}, fmt.Errorf("password: longer than %d bytes", maxPasswordLen)
	}
	if p.BFD != nil {
		bfd := *p.BFD
		if bfd.Interval == 0 {
			bfd.Interval = defaultBFDInterval
		}
		if bfd.Multiplier == 0 {
			bfd.Multiplier = defaultBFDMultiplier
		}
		if bfd.Interval < minBFDInterval || bfd.Interval > maxBFDInterval || bfd.Interval%time.Microsecond != 0 {
			return Peer{}, fmt.Errorf("bfd: interval %v is not whole microseconds in %v..%v", bfd.Interval, minBFDInterval, maxBFDInterval)
		}
		p.BFD = &bfd
	}
	if p.NextHop.IsValid() {
		p.NextHop = p.NextHop.Unmap()
		if p.NextHop.Is4() != p.Address.Is4() || p.NextHop.IsUnspecified() || p.NextHop.IsMulticast() {
			return Peer{}, fmt.Errorf("next_hop: %v is not a unicast address of the peer's family", p.NextHop)
		}
	}
	p.Communities = slices.Clone(p.Communities)
	return p, nil
}

// normalizeAnnouncements checks a desired set and returns it sorted by prefix.
func normalizeAnnouncements(desired []Announcement) ([]Announcement, error) {
	out := make([]Announcement, len(desired))
	seen := make(map[netip.Prefix]bool, len(desired))
	for i, a := range desired {
		p := a.Prefix
		if !p.IsValid() || p.Bits() != p.Addr().BitLen() || p.Addr().IsUnspecified() || p.Addr().Is4In6() {
			return nil, fmt.Errorf("announcements[%d]: prefix: %v is not a host route (/32 or /128)", i, p)
		}
		if seen[p] {
			return nil, fmt.Errorf("announcements[%d]: prefix: %v is listed twice", i, p)
		}
		seen[p] = true
		a.Communities = slices.Clone(a.Communities)
		out[i] = a
	}
	slices.SortFunc(out, func(a, b Announcement) int { return a.Prefix.Addr().Compare(b.Prefix.Addr()) })
	return out, nil
}

// PeerState is a BGP session state (RFC 4271 section 8).
type PeerState string

// The session states.
const (
	StateIdle        PeerState = "idle"
	StateConnect     PeerState = "connect"
	StateActive      PeerState = "active"
	StateOpenSent    PeerState = "opensent"
	StateOpenConfirm PeerState = "openconfirm"
	StateEstablished PeerState = "established"
)

// BFDState is a BFD session's state (RFC 5880 section 6.2).
type BFDState string

// The BFD session states; a peer without BFD has the empty state.
const (
	BFDAdminDown BFDState = "admindown"
	BFDDown      BFDState = "down"
	BFDInit      BFDState = "init"
	BFDUp        BFDState = "up"
)

// PeerStatus is one neighbour's session as the speaker sees it.
type PeerStatus struct {
	Address          netip.Addr
	Port             uint16
	ASN              uint32
	State            PeerState
	Since            time.Time     // when State began (uptime when established); zero if never
	HoldTime         time.Duration // negotiated, when established
	PrefixesSent     int
	PrefixesReceived int
	Flaps            uint64   // times the session went down after being established
	LastError        string   // last notification/error, if any
	BFD              BFDState // the BFD session's state; empty when the peer runs none
}

// Status is the speaker's identity, sessions and announcements.
type Status struct {
	ASN        uint32
	RouterID   netip.Addr
	ListenPort int32
	Peers      []PeerStatus   // sorted by address
	Announced  []Announcement // what Set last asked for, sorted by prefix
}

// EventKind names what happened to a session.
type EventKind string

// The event kinds.
const (
	PeerUp   EventKind = "peer_up"
	PeerDown EventKind = "peer_down"
)

// Event is a session going up or down.
type Event struct {
	Kind   EventKind
	Peer   netip.Addr
	State  PeerState
	Reason string
}
