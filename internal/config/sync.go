package config

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"time"
)

// Sync replicates connection state between balancer nodes, so that a flow keeps its backend when
// another node takes it over (a VRRP takeover or fail-back, ECMP moving it, a restart): conntrackd
// (FTFW) for the flows the nft datapath tracks, Sluice's own replication of the flow tables for
// the ebpf datapath.
type Sync struct {
	// Interface is the link the nodes replicate over (a dedicated one in production).
	Interface string `yaml:"interface" json:"interface"`
	// Address is this node's address on Interface; empty: the interface's first address of the
	// peers' (or the group's) family.
	Address IP `yaml:"address,omitempty" json:"address,omitzero"`
	// Peers are the other nodes' sync addresses (unicast); Group replaces them.
	Peers []IP `yaml:"peers,omitempty" json:"peers,omitempty"`
	// Group is a multicast group every node sends to and joins on Interface, instead of Peers.
	Group IP `yaml:"group,omitempty" json:"group,omitzero"`
	// Port is the UDP port of Sluice's flow replication (ebpf); conntrackd (nft) uses the next
	// one, and Sluice's full resync of the conntrack table (nft) the one after. Default 3780.
	Port int `yaml:"port,omitempty" json:"port,omitempty"`
	// SecretFile holds the secret the nodes share: updates are authenticated with it (HMAC-SHA256)
	// and those without it dropped. conntrackd's protocol has none: see docs/ha.md.
	SecretFile string `yaml:"secret_file" json:"secret_file"`
	// InitialSyncTimeout is how long a node that starts waits for a peer's full resync before it
	// takes traffic without it; default 10s, 0s: it does not wait.
	InitialSyncTimeout Duration `yaml:"initial_sync_timeout,omitempty" json:"initial_sync_timeout,omitzero"`
	// RefreshInterval is how often a node sends its peers its whole table of active flows again
	// (ebpf), so that their copies keep a fresh idle time; default 1m, 10s-10m. It must stay below
	// the services' flow_timeout for a copy to count as active between two refreshes.
	RefreshInterval Duration `yaml:"refresh_interval,omitempty" json:"refresh_interval,omitzero"`
}

// Defaults and bounds of the sync section.
const (
	DefaultSyncPort           = 3780
	DefaultInitialSyncTimeout = 10 * time.Second
	MaxInitialSyncTimeout     = 10 * time.Minute
	// DefaultRefreshInterval, MinRefreshInterval and MaxRefreshInterval are flowsync's (which
	// config does not import: config_test holds them equal).
	DefaultRefreshInterval = time.Minute
	MinRefreshInterval     = 10 * time.Second
	MaxRefreshInterval     = 10 * time.Minute
	// MaxSyncPeers bounds the unicast peers: every update goes to each of them.
	MaxSyncPeers = 16
)

// syncPortBounds are the ports sync.port may take: conntrackd takes the next one, the
// conntrack table's full resync the one after.
var syncPortBounds = bounds{1, 65533}

// PortOrDefault is the port of Sluice's flow replication.
func (s *Sync) PortOrDefault() int {
	if s.Port == 0 {
		return DefaultSyncPort
	}
	return s.Port
}

// ConntrackdPort is the port conntrackd replicates on: the one after PortOrDefault.
func (s *Sync) ConntrackdPort() int { return s.PortOrDefault() + 1 }

// ConntrackResyncPort is the port of Sluice's full resync of the conntrack table (beside
// conntrackd): the one after ConntrackdPort.
func (s *Sync) ConntrackResyncPort() int { return s.PortOrDefault() + 2 }

// InitialSyncTimeoutOrDefault is how long a starting node waits for its first full resync.
func (s *Sync) InitialSyncTimeoutOrDefault() time.Duration {
	return s.InitialSyncTimeout.Or(DefaultInitialSyncTimeout)
}

// RefreshIntervalOrDefault is how often a node resends its active flows to its peers.
func (s *Sync) RefreshIntervalOrDefault() time.Duration {
	return s.RefreshInterval.Or(DefaultRefreshInterval)
}

// Clone returns a deep copy of s (nil for nil).
func (s *Sync) Clone() *Sync {
	if s == nil {
		return nil
	}
	out := *s
	out.Peers = append([]IP(nil), s.Peers...)
	return &out
}

// validateSync checks the sync section; what it needs of the host (the interface, its address,
// conntrackd) is checked where it starts.
func (c *Config) validateSync(fail func(path, format string, args ...any)) {
	s := c.Sync
	if s == nil {
		return
	}
	if !validInterfaceName(s.Interface) {
		fail("sync.interface", "%q is not an interface name (%s)", s.Interface, interfaceNameRule)
	}
	family := s.validateAddresses(fail)
	if !s.Address.IsZero() {
		a, err := peerAddress(s.Address)
		switch {
		case err != nil:
			fail("sync.address", "%v", err)
		case family.IsValid() && a.Is4() != family.Is4():
			fail("sync.address", "%s is not of the family of the peers (%s)", a, family)
		default:
			s.Address.Addr = a
		}
	}
	if s.Port != 0 && !syncPortBounds.has(s.Port) {
		fail("sync.port", "%d is not a port in %s (conntrackd takes the next one, the conntrack table resync the one after)", s.Port, syncPortBounds)
	}
	if s.SecretFile == "" || !filepath.IsAbs(s.SecretFile) || filepath.Clean(s.SecretFile) != s.SecretFile {
		fail("sync.secret_file", "%q is not a clean absolute path: name the file holding the secret the nodes share (at least 16 characters)", s.SecretFile)
	}
	if t := s.InitialSyncTimeout; !t.IsZero() && !t.within(0, MaxInitialSyncTimeout, 1) {
		fail("sync.initial_sync_timeout", "%q is not a duration between 0s and %s (like 10s)", t, MaxInitialSyncTimeout)
	}
	if r := s.RefreshInterval; !r.IsZero() && !r.within(MinRefreshInterval, MaxRefreshInterval, 1) {
		fail("sync.refresh_interval", "%q is not a duration between %s and %s (like 1m): below, a large table would not be sent in time; above, the peers' copies age past a flow_timeout", r, MinRefreshInterval, MaxRefreshInterval)
	}
}

// validateAddresses checks the peers or the group and returns their family (an address of it),
// invalid when there is none to tell.
func (s *Sync) validateAddresses(fail func(path, format string, args ...any)) netip.Addr {
	switch {
	case len(s.Peers) == 0 && s.Group.IsZero():
		fail("sync", "neither peers nor group: list the other nodes' sync addresses, or a multicast group")
		return netip.Addr{}
	case len(s.Peers) > 0 && !s.Group.IsZero():
		fail("sync.group", "both peers and a group: give one")
		return netip.Addr{}
	case !s.Group.IsZero():
		g := s.Group.Unmap()
		if !g.IsMulticast() || g.Zone() != "" {
			fail("sync.group", "%q is not a multicast address", s.Group)
			return netip.Addr{}
		}
		s.Group.Addr = g
		return g
	case len(s.Peers) > MaxSyncPeers:
		fail("sync.peers", "%d peers is more than %d: use a multicast group", len(s.Peers), MaxSyncPeers)
		return netip.Addr{}
	}
	var family netip.Addr
	seen := map[netip.Addr]int{}
	for i := range s.Peers {
		at := fmt.Sprintf("sync.peers[%d]", i)
		a, err := peerAddress(s.Peers[i])
		switch {
		case err != nil:
			fail(at, "%v", err)
			continue
		case family.IsValid() && a.Is4() != family.Is4():
			fail(at, "%s is not of the family of sync.peers[0] (%s): the nodes replicate over one family", a, family)
			continue
		case a == s.Address.Unmap():
			fail(at, "%s is this node's own sync.address", a)
		}
		if j, dup := seen[a]; dup {
			fail(at, "%s is already sync.peers[%d]", a, j)
		}
		seen[a] = i
		s.Peers[i].Addr = a
		if !family.IsValid() {
			family = a
		}
	}
	return family
}
