// Package conntrackd runs Debian's conntrackd (FTFW mode) beside the nft datapath, so that the
// kernel's conntrack table, where nftables keeps the state of every nat and fullnat flow, is
// replicated to the other balancer nodes over a dedicated link: the way keepalived's
// lvs_sync_daemon is part of keepalived. Replicated entries are written straight into the peer's
// kernel table (DisableExternalCache), so a node that takes a flow over needs no notify script.
//
// The package renders conntrackd's configuration file (Render), supervises the process
// (Supervisor: started in its own process group, restarted with a growing backoff, stopped with
// SIGTERM then SIGKILL), reads its statistics (Status), and guards its port with nftables rules
// (table inet sluice-sync), since conntrackd's protocol authenticates nothing.
package conntrackd

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
)

// Options is what the Supervisor runs conntrackd with: the daemon's sync section, converted.
type Options struct {
	// Interface is the sync link.
	Interface string
	// Address is this node's address on Interface; invalid: the interface's first address of
	// the peers' (or the group's) family, found when the Supervisor starts.
	Address netip.Addr
	// Peers are the other nodes' addresses on the sync link. conntrackd's UDP transport has a
	// single destination: one peer is sent to over UDP; with more, conntrackd sends to
	// DefaultGroup4 or DefaultGroup6 on the link, and only the peers are accepted.
	Peers []netip.Addr
	// Group is the multicast group every node sends to and joins on Interface.
	Group netip.Addr
	// Port is conntrackd's UDP port (the sync section's ConntrackdPort).
	Port int
	// StateDir is the directory of conntrackd's files: its configuration, control socket and
	// lock file. One per daemon, so that two daemons in two namespaces do not collide.
	StateDir string
	// Binary is conntrackd's path; empty: conntrackd looked up in $PATH and /usr/sbin.
	Binary string
	// TableSize is the conntrack table size conntrackd's cache is sized for; 0: the namespace's
	// net.netfilter.nf_conntrack_max, read when the Supervisor starts.
	TableSize int
}

// FieldError is a refused option, named as in the sync section of Sluice's configuration.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Files conntrackd uses, under Options.StateDir.
const (
	ConfigName = "conntrackd.conf"
	SocketName = "conntrackd.ctl"
	LockName   = "conntrackd.lock"
	// supervisorLockName is held by the Supervisor that owns the directory.
	supervisorLockName = "supervisor.lock"
	// maxUnixPath is the longest path conntrackd's control socket may have (sun_path).
	maxUnixPath = 107
)

// ConfigPath is the path of conntrackd's configuration file.
func (o *Options) ConfigPath() string { return filepath.Join(o.StateDir, ConfigName) }

// SocketPath is the path of conntrackd's control socket.
func (o *Options) SocketPath() string { return filepath.Join(o.StateDir, SocketName) }

// LockPath is the path of conntrackd's lock file.
func (o *Options) LockPath() string { return filepath.Join(o.StateDir, LockName) }

// Family is the address family the nodes replicate over: the group's, else the peers'.
func (o *Options) Family() netip.Addr {
	if o.Group.IsValid() {
		return o.Group
	}
	if len(o.Peers) > 0 {
		return o.Peers[0]
	}
	return o.Address
}

// Clone returns a deep copy of o (nil for nil).
func (o *Options) Clone() *Options {
	if o == nil {
		return nil
	}
	out := *o
	out.Peers = slices.Clone(o.Peers)
	return &out
}

// Equal tells whether o and p run conntrackd the same way.
func (o *Options) Equal(p *Options) bool {
	if o == nil || p == nil {
		return o == p
	}
	return o.Interface == p.Interface && o.Address == p.Address && slices.Equal(o.Peers, p.Peers) &&
		o.Group == p.Group && o.Port == p.Port && o.StateDir == p.StateDir && o.Binary == p.Binary &&
		o.TableSize == p.TableSize
}

// Check refuses the options that cannot work whatever the host, each error naming its field.
func (o *Options) Check() error {
	if o.Interface == "" || len(o.Interface) > 15 || !plain(o.Interface) || strings.ContainsRune(o.Interface, '/') {
		return fieldErr("sync.interface", "%q is not an interface name", o.Interface)
	}
	if err := o.checkDestinations(); err != nil {
		return err
	}
	fam := o.Family()
	if o.Address.IsValid() && (o.Address.Is4() != fam.Is4() || !o.Address.IsGlobalUnicast() && !o.Address.IsLinkLocalUnicast()) {
		return fieldErr("sync.address", "%s is not a unicast address of the family of the peers (%s)", o.Address, fam)
	}
	if o.Port < 1 || o.Port > 65535 {
		return fieldErr("sync.port", "%d is not a port", o.Port)
	}
	if !filepath.IsAbs(o.StateDir) || filepath.Clean(o.StateDir) != o.StateDir || !plain(o.StateDir) {
		return fieldErr("sync", "the state directory %q is not a clean absolute path of printable characters without spaces, quotes, braces or #", o.StateDir)
	}
	if n := len(o.SocketPath()); n > maxUnixPath {
		return fieldErr("sync", "the control socket %s is %d bytes long, more than a unix socket's %d: use a shorter state directory", o.SocketPath(), n, maxUnixPath)
	}
	if o.TableSize < 0 {
		return fieldErr("sync", "a conntrack table of %d entries", o.TableSize)
	}
	return nil
}

// plain tells whether s can be written as one token of conntrackd's configuration file.
func plain(s string) bool {
	for _, r := range s {
		if r <= ' ' || r > '~' || strings.ContainsRune(`"'#{}`, r) {
			return false
		}
	}
	return true
}

// checkDestinations checks that conntrackd has somewhere to send to: peers or a group.
func (o *Options) checkDestinations() error {
	switch {
	case o.Group.IsValid() && len(o.Peers) > 0:
		return fieldErr("sync.group", "both peers and a group: give one")
	case o.Group.IsValid():
		if !o.Group.IsMulticast() || o.Group.Zone() != "" {
			return fieldErr("sync.group", "%s is not a multicast address", o.Group)
		}
		return nil
	case len(o.Peers) == 0:
		return fieldErr("sync", "neither peers nor group: list the other nodes' sync addresses, or a multicast group")
	}
	for i, p := range o.Peers {
		at := fmt.Sprintf("sync.peers[%d]", i)
		switch {
		case !p.IsValid() || p.Zone() != "" || p.Is4In6() || !p.IsGlobalUnicast() && !p.IsLinkLocalUnicast():
			return fieldErr(at, "%s is not a unicast address", p)
		case p.Is4() != o.Peers[0].Is4():
			return fieldErr(at, "%s is not of the family of sync.peers[0] (%s)", p, o.Peers[0])
		case p == o.Address:
			return fieldErr(at, "%s is this node's own sync.address", p)
		case slices.Index(o.Peers, p) < i:
			return fieldErr(at, "%s is already sync.peers[%d]", p, slices.Index(o.Peers, p))
		}
	}
	return nil
}

// Multicast groups conntrackd sends to when more than one peer is listed and no group is given:
// its UDP transport has a single destination. Administratively scoped (IPv4) and link-local
// (IPv6), so they stay on the sync link; the nft rules still accept only the listed peers.
var (
	DefaultGroup4 = netip.MustParseAddr("239.255.37.80")
	DefaultGroup6 = netip.MustParseAddr("ff02::3780")
)

// Destination is where conntrackd sends: the group, else the only peer, else the default group
// of the peers' family.
func (o *Options) Destination() netip.Addr {
	switch {
	case o.Group.IsValid():
		return o.Group
	case len(o.Peers) == 1:
		return o.Peers[0]
	case o.Family().Is4():
		return DefaultGroup4
	default:
		return DefaultGroup6
	}
}

// Multicast tells whether conntrackd sends to a group rather than to one peer.
func (o *Options) Multicast() bool { return o.Destination().IsMulticast() }
