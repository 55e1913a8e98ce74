package conntrackd

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/sluicelb/sluice/internal/datapath"
)

// inNamespace runs fn on a thread of its own switched into ns. The thread is never switched
// back: it ends with the goroutine, so no other goroutine can land in ns.
func inNamespace(ns netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if err := netns.Set(ns); err != nil {
			errc <- fmt.Errorf("entering the network namespace: %w", err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// settled is what Set found on the host for a set of options.
type settled struct {
	opts  *Options // Address, Binary and TableSize filled in
	guard guard
}

// settle checks o against the calling thread's network namespace and fills in what o leaves to
// it, each refusal naming its field.
func settle(o *Options) (*settled, error) {
	out := o.Clone()
	bin, err := findBinary(o.Binary)
	if err != nil {
		return nil, err
	}
	out.Binary = bin
	local, err := LinkAddress(o)
	if err != nil {
		return nil, err
	}
	out.Address = local.Addr()
	if out.TableSize == 0 {
		out.TableSize = readTableSize()
	}
	g := guard{iface: o.Interface, port: o.Port}
	if o.Multicast() {
		g.group = o.Destination()
	}
	for _, p := range o.Peers {
		g.sources = append(g.sources, netip.PrefixFrom(p, p.BitLen()))
	}
	if len(g.sources) == 0 { // a group: the nodes are on the sync address's subnet
		g.sources = []netip.Prefix{local.Masked()}
	}
	return &settled{opts: out, guard: g}, nil
}

// LinkAddress checks the sync link of o against the calling thread's network namespace: the
// interface exists, has o.Address (or, without one, an address of the peers' family, which it
// returns with its prefix), and no peer is an address of this node. Refusals name their field.
func LinkAddress(o *Options) (netip.Prefix, error) {
	link, err := netlink.LinkByName(o.Interface)
	if err != nil {
		return netip.Prefix{}, fieldErr("sync.interface", "%s: no such interface in this network namespace (%v)", o.Interface, err)
	}
	family := netlink.FAMILY_V4
	if !o.Family().Is4() {
		family = netlink.FAMILY_V6
	}
	addrs, err := netlink.AddrList(link, family)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("listing the addresses of %s: %w", o.Interface, err)
	}
	local, ok := pickAddress(addrs, o.Address)
	switch {
	case !ok && o.Address.IsValid():
		return netip.Prefix{}, fieldErr("sync.address", "%s is not an address of %s", o.Address, o.Interface)
	case !ok:
		return netip.Prefix{}, fieldErr("sync.address", "%s has no address of the peers' family (%s): give it one, or name it in sync.address", o.Interface, o.Family())
	}
	return local, notOwn(o.Peers)
}

// pickAddress returns want if addrs has it, else (want invalid) the first global address, else
// the first one.
func pickAddress(addrs []netlink.Addr, want netip.Addr) (netip.Prefix, bool) {
	var prefixes []netip.Prefix
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ones, _ := a.Mask.Size()
		prefixes = append(prefixes, netip.PrefixFrom(ip.Unmap(), ones))
	}
	if want.IsValid() {
		i := slices.IndexFunc(prefixes, func(p netip.Prefix) bool { return p.Addr() == want })
		return prefixOr(prefixes, i)
	}
	i := slices.IndexFunc(prefixes, func(p netip.Prefix) bool { return p.Addr().IsGlobalUnicast() })
	if i < 0 && len(prefixes) > 0 {
		i = 0
	}
	return prefixOr(prefixes, i)
}

func prefixOr(prefixes []netip.Prefix, i int) (netip.Prefix, bool) {
	if i < 0 {
		return netip.Prefix{}, false
	}
	return prefixes[i], true
}

// notOwn refuses a peer that is an address of this node.
func notOwn(peers []netip.Addr) error {
	own, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("listing this node's addresses: %w", err)
	}
	for i, p := range peers {
		for _, a := range own {
			if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == p {
				return fieldErr(fmt.Sprintf("sync.peers[%d]", i), "%s is an address of this node: list the other nodes", p)
			}
		}
	}
	return nil
}

// findBinary is conntrackd's path: bin if given, else conntrackd in $PATH or /usr/sbin.
func findBinary(bin string) (string, error) {
	if bin == "" {
		if p, err := exec.LookPath("conntrackd"); err == nil {
			return p, nil
		}
		bin = "/usr/sbin/conntrackd"
	}
	if st, err := os.Stat(bin); err != nil || !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
		return "", fieldErr("sync", "conntrackd is not installed (no executable %s): apt-get install conntrackd", bin)
	}
	return bin, nil
}

// LiberalSysctl is the sysctl a node whose conntrack entries move between nodes needs at 1.
const LiberalSysctl = "net.netfilter.nf_conntrack_tcp_be_liberal"

// CheckLiberalTCP refuses a namespace whose conntrack checks TCP windows: conntrackd replicates a
// connection's state, not its window, so a node that takes a connection over (or back, after a
// drain or a takeover) holds a window its segments have moved past, and conntrack drops them as
// invalid: the connection stalls. The conntrack-tools manual asks for the liberal mode for that.
func CheckLiberalTCP() error {
	v, err := datapath.ReadSysctl(LiberalSysctl)
	if err != nil {
		return fieldErr("sync", "reading %s: %v", LiberalSysctl, err)
	}
	if v == 0 {
		return fieldErr("sync", "%s is 0: a connection that moves between nodes would stall, its TCP window not replicated (sysctl -w %s=1, and in /etc/sysctl.d to keep it)",
			LiberalSysctl, LiberalSysctl)
	}
	return nil
}

// readTableSize is the namespace's conntrack table size, DefaultTableSize if unreadable.
func readTableSize() int {
	_, max, err := datapath.ConntrackFill()
	if err != nil || max == 0 {
		return DefaultTableSize
	}
	return int(max)
}

// clientOutput bounds what a conntrackd client command may print.
const clientOutput = 64 << 10

// client runs conntrackd as a client of the running daemon (`conntrackd -C file args...`) in
// the calling thread's namespace, and returns its output, bounded.
func client(ctx context.Context, o *Options, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, clientTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, o.Binary, append([]string{"-C", o.ConfigPath()}, args...)...)
	out := &tailBuffer{limit: clientOutput}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = childEnv()
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("conntrackd %v: %w: %s", args, err, lastLine(out.String()))
	}
	if out.dropped > 0 {
		return "", errors.New("conntrackd's answer is longer than " + strconv.Itoa(clientOutput) + " bytes")
	}
	return out.String(), nil
}
