package flowsync

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/sluicelb/sluice/internal/config"
)

// Defaults of Options.
const (
	DefaultMTU        = 1400
	DefaultQueueLimit = 65536
	DefaultHeartbeat  = time.Second
	DefaultResyncRate = 8 << 20
	DefaultMaxSkew    = 30 * time.Second
	// DefaultRefreshInterval is how often a node sends its peers its active flows again.
	DefaultRefreshInterval = time.Minute
	// MinRefreshInterval and MaxRefreshInterval bound the refresh interval a sync section may
	// ask for: below, a large table (a million flows take about 4 s at the default ResyncRate)
	// would mostly skip; above, a peer's copies would age past any sensible flow_timeout between
	// two refreshes. The package itself takes any positive interval up to MaxRefreshInterval
	// (tests use milliseconds).
	MinRefreshInterval = 10 * time.Second
	MaxRefreshInterval = 10 * time.Minute
	// MinSecret is the shortest shared secret accepted.
	MinSecret = 16
)

// Options configure a Replicator; the zero value of each field but Secret, Peers or Group and
// InitialSyncTimeout takes its default.
type Options struct {
	// Interface is the sync link: the socket is bound to it (SO_BINDTODEVICE, which needs
	// CAP_NET_RAW) and a group is joined on it. Required with Group; empty: any link.
	Interface string
	// Address is this node's sync address, which the socket is bound to with Peers; invalid:
	// the wildcard address of the peers' family. With a group the socket is bound to the
	// wildcard address, to take in the group's datagrams and the resyncs sent to this node.
	Address netip.Addr
	// Peers are the other nodes' sync addresses (unicast); Group replaces them.
	Peers []netip.Addr
	// Group is a multicast group every node sends to and joins on Interface, with a TTL of 1.
	Group netip.Addr
	// Port is the UDP port every node uses; default config.DefaultSyncPort.
	Port int
	// Secret is the key the nodes share (read from sync.secret_file), at least MinSecret bytes.
	Secret []byte
	// InitialSyncTimeout is how long after Run the initial sync waits for a peer's full resync
	// before it counts as done without one; 0: it is done at once.
	InitialSyncTimeout time.Duration
	// MTU is the largest datagram (UDP payload) sent, in bytes; default DefaultMTU.
	MTU int
	// QueueLimit is how many flows wait to be sent at most; more are dropped and counted.
	QueueLimit int
	// Heartbeat is the interval of heartbeats; a peer is down after three without a datagram.
	Heartbeat time.Duration
	// ResyncRate bounds the full resyncs and refreshes this node sends, in bytes per second,
	// all together.
	ResyncRate int
	// RefreshInterval is how often this node sends its active flows to its connected peers (or
	// the group) again, so that their copies keep a fresh idle time: the datapath tells of a
	// flow only when it is created or starts closing. It must be shorter than the shortest flow_timeout
	// of the services, and with fullnat than the 120 s after which a peer reuses an idle flow's
	// source port; default DefaultRefreshInterval, at most MaxRefreshInterval.
	RefreshInterval time.Duration
	// NoRefresh turns the refresh off: for a table whose copies need none (the kernel's
	// conntrack table, whose live changes conntrackd sends).
	NoRefresh bool
	// ResyncOnce makes this node ask each peer for a full resync once, the first time it hears
	// it (whenever that is: before or after the initial sync's timeout), not when it comes back,
	// nor after a time cut off from every peer (see Rejoin): for a table whose copies a resync
	// cannot tell from the node's own flows, where a peer's copy of a flow that ended here while
	// the peer could not hear would come back as a live one (internal/cttable). A peer that
	// restarts (a new node id) is asked again, for the flows it saw a packet of since it was last
	// heard (and a heartbeat before): those it served while it could not send its changes, and
	// none of the copies it holds of flows that may have ended here meanwhile.
	ResyncOnce bool
	// MaxSkew is how far a datagram's clock may be from this node's before it is dropped as a
	// replay: the nodes' clocks must be within it of each other (NTP).
	MaxSkew time.Duration
	// Notify, if set, is told of peers going up and down and of resyncs; it must not block.
	Notify func(Event)
}

// resolve checks o and fills in the defaults; errors name the field.
func (o Options) resolve() (Options, error) {
	var errs []error
	fail := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("flowsync: %s: %s", field, fmt.Sprintf(format, args...)))
	}
	if len(o.Secret) < MinSecret {
		fail("secret", "%d bytes, at least %d needed", len(o.Secret), MinSecret)
	}
	o.Group = o.Group.Unmap()
	o.Address = o.Address.Unmap()
	family := o.resolvePeers(fail)
	if o.Address.IsValid() && family.IsValid() && o.Address.Is4() != family.Is4() {
		fail("address", "%s is not of the family of the peers or group", o.Address)
	}
	defaultInt(&o.Port, config.DefaultSyncPort)
	defaultInt(&o.MTU, DefaultMTU)
	defaultInt(&o.QueueLimit, DefaultQueueLimit)
	defaultInt(&o.ResyncRate, DefaultResyncRate)
	defaultDuration(&o.Heartbeat, DefaultHeartbeat)
	defaultDuration(&o.MaxSkew, DefaultMaxSkew)
	defaultDuration(&o.RefreshInterval, DefaultRefreshInterval)
	switch {
	case o.Port < 1 || o.Port > 65535:
		fail("port", "%d is not a port", o.Port)
	case o.MTU < minMTU || o.MTU > maxDatagram:
		fail("mtu", "%d is not between %d and %d", o.MTU, minMTU, maxDatagram)
	case o.QueueLimit < 0 || o.ResyncRate < 0 || o.Heartbeat < 0 || o.MaxSkew < 0 || o.InitialSyncTimeout < 0:
		fail("options", "a negative queue limit, resync rate, heartbeat, skew or timeout")
	case o.RefreshInterval < 0 || o.RefreshInterval > MaxRefreshInterval:
		fail("refresh_interval", "%s is not between 0 (the default, %s) and %s", o.RefreshInterval, DefaultRefreshInterval, MaxRefreshInterval)
	}
	if err := errors.Join(errs...); err != nil {
		return Options{}, err
	}
	return o, nil
}

// resolvePeers checks the peers or the group and returns their family (an address of it).
func (o *Options) resolvePeers(fail func(field, format string, args ...any)) netip.Addr {
	switch {
	case len(o.Peers) == 0 && !o.Group.IsValid():
		fail("peers", "neither peers nor a group")
		return netip.Addr{}
	case len(o.Peers) > 0 && o.Group.IsValid():
		fail("group", "both peers and a group")
		return netip.Addr{}
	case o.Group.IsValid():
		if !o.Group.IsMulticast() {
			fail("group", "%s is not a multicast address", o.Group)
		}
		if o.Interface == "" {
			fail("interface", "a group needs the interface to join it on")
		}
		return o.Group
	}
	peers := make([]netip.Addr, len(o.Peers))
	for i, p := range o.Peers {
		p = p.Unmap()
		switch {
		case !p.IsValid() || p.IsUnspecified() || p.IsMulticast():
			fail(fmt.Sprintf("peers[%d]", i), "%s is not a unicast address", p)
		case p.Is4() != o.Peers[0].Unmap().Is4():
			fail(fmt.Sprintf("peers[%d]", i), "%s is not of the family of peers[0]", p)
		case p == o.Address:
			fail(fmt.Sprintf("peers[%d]", i), "%s is this node's own address", p)
		}
		peers[i] = p
	}
	o.Peers = peers
	return peers[0]
}

func defaultInt(v *int, def int) {
	if *v == 0 {
		*v = def
	}
}

func defaultDuration(v *time.Duration, def time.Duration) {
	if *v == 0 {
		*v = def
	}
}

// family is the address family of the sync link: of the group, or of the peers.
func (o *Options) family() netip.Addr {
	if o.Group.IsValid() {
		return o.Group
	}
	return o.Peers[0]
}
