package lab

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// dsrTable is the backends' routing table for replies sourced from a VIP.
const dsrTable = 100

// endpoint is one interface in one namespace.
type endpoint struct{ ns, dev string }

// vethPair is created in a.ns with its peer directly in b.ns; a joins bridge, if set, in a.ns.
type vethPair struct {
	a, b   endpoint
	bridge string
}

type ifAddr struct {
	endpoint
	prefix netip.Prefix
}

func (l *Lab) vethPairs() []vethPair {
	sw := l.SwitchNS()
	pairs := []vethPair{
		{endpoint{l.ClientNS(), "eth0"}, endpoint{l.BalancerNS(), "eth0"}, ""},
		{endpoint{sw, "lb"}, endpoint{l.BalancerNS(), "eth1"}, "br0"},
	}
	if l.fleet() {
		pairs = l.routerPairs()
	}
	pairs = append(pairs, vethPair{endpoint{sw, "client"}, endpoint{l.ClientNS(), "byp0"}, "br0"})
	if l.fleet() {
		pairs = append(pairs, l.balancerPairs()...)
	}
	if l.Attacker {
		pairs = append(pairs, l.attackerPair())
	}
	if l.RoutedBackends {
		return append(pairs, l.routedPairs()...)
	}
	for i := 1; i <= l.Backends; i++ {
		pairs = append(pairs, vethPair{endpoint{sw, BackendName(i)}, endpoint{l.BackendNS(i), "eth0"}, "br0"})
	}
	return pairs
}

// addrPair is the IPv4 and the IPv6 address of one interface.
func addrPair(ns, dev string, bits4, bits6 int, addr func(v6 bool) netip.Addr) []ifAddr {
	return []ifAddr{
		{endpoint{ns, dev}, netip.PrefixFrom(addr(false), bits4)},
		{endpoint{ns, dev}, netip.PrefixFrom(addr(true), bits6)},
	}
}

func (l *Lab) ifAddrs() []ifAddr {
	out := slices.Concat(
		addrPair(l.ClientNS(), "eth0", 24, 64, l.ClientAddr),
		addrPair(l.ClientNS(), "byp0", 32, 128, l.ClientBypassAddr))
	if l.fleet() {
		out = append(out, l.fleetAddrs()...)
	} else {
		out = slices.Concat(out,
			addrPair(l.BalancerNS(), "eth0", 24, 64, l.BalancerClientSideAddr),
			addrPair(l.BalancerNS(), "eth1", 24, 64, l.BalancerBackendSideAddr))
	}
	if l.Attacker {
		out = append(out, l.attackerAddrs()...)
	}
	if l.RoutedBackends {
		out = append(out, l.routedAddrs()...)
	}
	for i := 1; i <= l.Backends; i++ {
		out = append(out, addrPair(l.BackendNS(i), "eth0", 24, 64, func(v6 bool) netip.Addr { return l.BackendAddr(i, v6) })...)
	}
	return out
}

// bridges lists the switch namespace's bridges: br0 joins the backends, br1 a fleet's router and balancers.
func (l *Lab) bridges() []string {
	if l.fleet() {
		return []string{"br0", "br1"}
	}
	return []string{"br0"}
}

// links lists every interface the lab expects, per namespace.
func (l *Lab) links() map[string][]string {
	m := map[string][]string{}
	for _, ns := range l.Namespaces() {
		m[ns] = []string{"lo"}
	}
	m[l.SwitchNS()] = append(m[l.SwitchNS()], l.bridges()...)
	for _, p := range l.vethPairs() {
		m[p.a.ns] = append(m[p.a.ns], p.a.dev)
		m[p.b.ns] = append(m[p.b.ns], p.b.dev)
	}
	return m
}

// The stamp file, written after a successful build, records the lab's shape; a fleet's also has
// its balancer count.
const (
	stampFormat       = "sluice-lab v2 backends=%d\n"
	fleetStampFormat  = "sluice-lab v2 backends=%d balancers=%d\n"
	routedStampFormat = "sluice-lab v2 backends=%d routed\n"
)

func (l *Lab) stampPath() string { return filepath.Join(l.StateDir, "topology") }

func (l *Lab) stamp() []byte {
	if l.fleet() {
		return fmt.Appendf(nil, fleetStampFormat, l.Backends, l.Balancers)
	}
	if l.RoutedBackends {
		return fmt.Appendf(nil, routedStampFormat, l.Backends)
	}
	return fmt.Appendf(nil, stampFormat, l.Backends)
}

// builtShape is the backend and balancer counts recorded by the last successful build, or 0, 0.
func (l *Lab) builtShape() (backends, balancers int) {
	b, err := os.ReadFile(l.stampPath())
	if err != nil {
		return 0, 0
	}
	if _, err := fmt.Sscanf(string(b), fleetStampFormat, &backends, &balancers); err == nil {
		return backends, balancers
	}
	if _, err := fmt.Sscanf(string(b), routedStampFormat, &backends); err == nil {
		return backends, 1
	}
	if _, err := fmt.Sscanf(string(b), stampFormat, &backends); err == nil {
		return backends, 1
	}
	return 0, 0
}

// built reports whether a complete topology of this shape exists: the stamp
// written after a successful build, exactly the expected namespaces, and
// every expected link present and up.
func (l *Lab) built() bool {
	if stamp, err := os.ReadFile(l.stampPath()); err != nil || !bytes.Equal(stamp, l.stamp()) {
		return false
	}
	have, err := l.labNamespaces()
	want := l.Namespaces()
	slices.Sort(have)
	slices.Sort(want)
	if err != nil || !slices.Equal(have, want) {
		return false
	}
	for ns, devs := range l.links() {
		err := WithHandle(ns, func(h *netlink.Handle) error {
			for _, dev := range devs {
				link, err := h.LinkByName(dev)
				if err != nil {
					return err
				}
				if link.Attrs().Flags&net.FlagUp == 0 {
					return fmt.Errorf("%s is down", dev)
				}
			}
			return nil
		})
		if err != nil {
			return false
		}
	}
	return true
}

// plainSwitch makes the switch namespace's bridges plain layer-2 switches. On a kernel with
// br_netfilter, every bridged IP frame otherwise passes the switch's own IP netfilter hooks
// (a tenth to a fifth of a small frame's cost through the lab), which no real switch does.
func (l *Lab) plainSwitch() error {
	return inNS(l.SwitchNS(), func() error {
		for _, table := range []string{"arptables", "iptables", "ip6tables"} {
			path := "/proc/sys/net/bridge/bridge-nf-call-" + table
			if err := os.WriteFile(path, []byte("0"), 0o644); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("%s=0 in %s: %w", path, l.SwitchNS(), err)
			}
		}
		return nil
	})
}

// loadGeneratorTCP are the client's TCP settings: it opens tens of thousands of connections a
// second from one address, to several destinations (the backends, the anycast address, VIPs).
// It takes back its ports in TIME_WAIT (tcp_tw_reuse 1): without, connect()'s search of a port
// range crowded with them (__inet_hash_connect) took both CPUs for seconds at a time, and a
// benchmark's round fell to a fifth of its rate with no error. It stamps every connection on one
// clock (tcp_timestamps 2, no offset per destination): with an offset per destination, a SYN
// reusing a port that a backend still holds in TIME_WAIT from a connection to another
// destination could carry an older timestamp, which the backend drops (PAWS), and the client
// retried a second later.
var loadGeneratorTCP = []sysctl{{"net.ipv4.tcp_tw_reuse", "1"}, {"net.ipv4.tcp_timestamps", "2"}}

// build creates namespaces, links, addresses, routes and sysctls from scratch.
func (l *Lab) build() error {
	for _, ns := range l.Namespaces() {
		if err := createNS(ns); err != nil {
			return err
		}
		// Links created later inherit the defaults.
		if err := setSysctls(ns,
			sysctl{"net.ipv4.conf.all.rp_filter", "0"},
			sysctl{"net.ipv4.conf.default.rp_filter", "0"},
			sysctl{"net.ipv6.conf.all.accept_dad", "0"},
			sysctl{"net.ipv6.conf.default.accept_dad", "0"},
		); err != nil {
			return err
		}
	}
	if err := setSysctls(l.ClientNS(), loadGeneratorTCP...); err != nil {
		return err
	}
	for _, br := range l.bridges() {
		if err := WithHandle(l.SwitchNS(), func(h *netlink.Handle) error {
			return h.LinkAdd(&netlink.Bridge{LinkAttrs: linkAttrs(br)})
		}); err != nil {
			return fmt.Errorf("create %s: %w", br, err)
		}
	}
	if err := l.plainSwitch(); err != nil {
		return err
	}
	for _, p := range l.vethPairs() {
		if err := addVeth(p); err != nil {
			return err
		}
	}
	for ns := range l.links() {
		if err := l.configureLinks(ns); err != nil {
			return err
		}
	}
	for _, a := range l.ifAddrs() {
		if err := WithHandle(a.ns, func(h *netlink.Handle) error {
			link, err := h.LinkByName(a.dev)
			if err != nil {
				return err
			}
			return h.AddrAdd(link, &netlink.Addr{IPNet: ipNet(a.prefix), Flags: unix.IFA_F_NODAD})
		}); err != nil {
			return fmt.Errorf("address %s on %s/%s: %w", a.prefix, a.ns, a.dev, err)
		}
	}
	if err := l.clientRoutes(); err != nil {
		return err
	}
	for i := 1; i <= l.Backends; i++ {
		if err := l.backendSetup(i); err != nil {
			return err
		}
	}
	if l.fleet() {
		if err := l.fleetSetup(); err != nil {
			return err
		}
	} else if l.RoutedBackends {
		if err := l.routedSetup(); err != nil {
			return err
		}
		if err := setSysctls(l.BalancerNS(), sysctl{"net.ipv4.ip_forward", "1"}, sysctl{"net.ipv6.conf.all.forwarding", "1"}, liberalTCP); err != nil {
			return err
		}
	} else if err := l.gatewaySetup(l.BalancerNS(), "eth1", liberalTCP); err != nil {
		return err
	}
	if l.Attacker {
		if err := l.attackerRoutes(); err != nil {
			return err
		}
	}
	return os.WriteFile(l.stampPath(), l.stamp(), 0o644)
}

func linkAttrs(name string) netlink.LinkAttrs {
	a := netlink.NewLinkAttrs()
	a.Name = name
	a.MTU = 1500
	return a
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// addVeth creates the pair in p.a.ns with the peer directly in p.b.ns, so no
// end ever appears in the root namespace; the a-end joins p.bridge, if set.
func addVeth(p vethPair) error {
	peerNS, err := netns.GetFromName(p.b.ns)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", p.b.ns, err)
	}
	defer peerNS.Close()
	return WithHandle(p.a.ns, func(h *netlink.Handle) error {
		veth := &netlink.Veth{
			LinkAttrs:     linkAttrs(p.a.dev),
			PeerName:      p.b.dev,
			PeerNamespace: netlink.NsFd(peerNS),
			PeerTxQLen:    -1,
		}
		if err := h.LinkAdd(veth); err != nil {
			return fmt.Errorf("veth %s/%s <-> %s/%s: %w", p.a.ns, p.a.dev, p.b.ns, p.b.dev, err)
		}
		if p.bridge == "" {
			return nil
		}
		br, err := h.LinkByName(p.bridge)
		if err != nil {
			return err
		}
		return h.LinkSetMaster(veth, br)
	})
}

// configureLinks sets per-interface sysctls and brings every link in ns up.
func (l *Lab) configureLinks(ns string) error {
	var settings []sysctl
	for _, dev := range l.links()[ns] {
		settings = append(settings,
			sysctl{"net.ipv4.conf." + dev + ".rp_filter", "0"},
			sysctl{"net.ipv6.conf." + dev + ".accept_dad", "0"})
	}
	if err := setSysctls(ns, settings...); err != nil {
		return err
	}
	return WithHandle(ns, func(h *netlink.Handle) error {
		for _, dev := range l.links()[ns] {
			link, err := h.LinkByName(dev)
			if err == nil {
				err = h.LinkSetUp(link)
			}
			if err != nil {
				return fmt.Errorf("up %s/%s: %w", ns, dev, err)
			}
		}
		return nil
	})
}

// gatewaySetup turns on forwarding in ns, the hop between the client and the backends, and
// routes Anycast4 over dev to every backend by a multipath route hashed on the 5-tuple
// (fib_multipath_hash_policy 1), with any further sysctls.
func (l *Lab) gatewaySetup(ns, dev string, more ...sysctl) error {
	if err := setSysctls(ns, append([]sysctl{
		{"net.ipv4.ip_forward", "1"},
		{"net.ipv6.conf.all.forwarding", "1"},
		{"net.ipv4.fib_multipath_hash_policy", "1"},
	}, more...)...); err != nil {
		return err
	}
	return WithHandle(ns, func(h *netlink.Handle) error {
		link, err := h.LinkByName(dev)
		if err != nil {
			return err
		}
		route := &netlink.Route{Dst: ipNet(netip.PrefixFrom(netip.MustParseAddr(Anycast4), 32))}
		for i := 1; i <= l.Backends; i++ {
			route.MultiPath = append(route.MultiPath, &netlink.NexthopInfo{LinkIndex: link.Attrs().Index, Gw: l.BackendAddr(i, false).AsSlice()})
		}
		if err := h.RouteAdd(route); err != nil {
			return fmt.Errorf("multipath route %s: %w", Anycast4, err)
		}
		return nil
	})
}

func (l *Lab) clientRoutes() error {
	return WithHandle(l.ClientNS(), func(h *netlink.Handle) error {
		eth0, err := h.LinkByName("eth0")
		if err != nil {
			return err
		}
		for _, v6 := range []bool{false, true} {
			gw := l.BalancerClientSideAddr(v6)
			if err := h.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: gw.AsSlice()}); err != nil {
				return fmt.Errorf("client default route via %s: %w", gw, err)
			}
		}
		return nil
	})
}

// backendSetup gives backend i its default route via the balancer, AnyIP VIP
// ranges and Anycast4 on lo, ARP settings, and policy routing that sends
// VIP-sourced (DSR) replies straight to the client's bypass address.
func (l *Lab) backendSetup(i int) error {
	ns := l.BackendNS(i)
	if err := setSysctls(ns,
		sysctl{"net.ipv4.conf.all.arp_ignore", "1"},
		sysctl{"net.ipv4.conf.eth0.arp_ignore", "1"},
		sysctl{"net.ipv4.conf.all.arp_announce", "2"},
		sysctl{"net.ipv4.conf.eth0.arp_announce", "2"},
	); err != nil {
		return err
	}
	return WithHandle(ns, func(h *netlink.Handle) error {
		eth0, err := h.LinkByName("eth0")
		if err != nil {
			return err
		}
		lo, err := h.LinkByName("lo")
		if err != nil {
			return err
		}
		if err := h.AddrAdd(lo, &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(netip.MustParseAddr(Anycast4), 32))}); err != nil {
			return fmt.Errorf("address %s on lo: %w", Anycast4, err)
		}
		for _, v6 := range []bool{false, true} {
			vipNet, family := netip.MustParsePrefix(VIPNet4), netlink.FAMILY_V4
			if v6 {
				vipNet, family = netip.MustParsePrefix(VIPNet6), netlink.FAMILY_V6
			}
			gw := l.BackendGateway(i, v6)
			if err := h.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: gw.AsSlice()}); err != nil {
				return fmt.Errorf("default route via %s: %w", gw, err)
			}
			if err := h.RouteAdd(&netlink.Route{
				LinkIndex: lo.Attrs().Index, Dst: ipNet(vipNet), Type: unix.RTN_LOCAL,
				Table: unix.RT_TABLE_LOCAL, Scope: netlink.SCOPE_HOST,
			}); err != nil {
				return fmt.Errorf("local route %s: %w", vipNet, err)
			}
			via, flags := l.vipSourcedGateway(i, v6)
			if err := h.RouteAdd(&netlink.Route{
				LinkIndex: eth0.Attrs().Index, Gw: via.AsSlice(), Table: dsrTable, Flags: flags,
			}); err != nil {
				return fmt.Errorf("table %d default via %s: %w", dsrTable, via, err)
			}
			rule := netlink.NewRule()
			rule.Family = family
			rule.Src = ipNet(vipNet)
			rule.Table = dsrTable
			rule.Priority = dsrTable
			if err := h.RuleAdd(rule); err != nil {
				return fmt.Errorf("rule from %s: %w", vipNet, err)
			}
		}
		return nil
	})
}
