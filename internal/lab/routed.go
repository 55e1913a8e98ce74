package lab

import (
	"fmt"
	"net/netip"
	"path/filepath"

	"github.com/vishvananda/netlink"

	"github.com/sluicelb/sluice/internal/datapath/ebpf"
	"github.com/sluicelb/sluice/internal/decap"
)

// A lab with routed backends (Lab.RoutedBackends, `sluice-lab lab up --routed-backends`) puts
// the backends behind a router of their own, {Prefix}-router, each on its own subnet: backend i
// is 10.(91+i).1.11 / fd00:(91+i):1::11 behind the router's 10.(91+i).1.1, and the router sits on
// the balancer's backend-side bridge at 10.91.2.254 / fd00:91:2::fe. The balancer reaches the
// backends through it, as mode tunnel's balancers reach backends in other racks: dsr (a MAC
// rewrite) cannot, tunnel can. Each backend decapsulates with sluice decap (the lab's kernel has
// no ipip/fou) and still answers from the VIP straight to the client: the router sends
// VIP-sourced packets to the client's bypass address on the bridge.

// RouterBridgeAddr is the backends' router's address on the backend-side bridge.
func (l *Lab) RouterBridgeAddr(v6 bool) netip.Addr { return pick(v6, "10.91.2.254", "fd00:91:2::fe") }

// routedSubnet is routed backend i's subnet, host part left to the caller: "10.92.1." for
// backend 1, "fd00:92:1::" in IPv6.
func routedSubnet(i int, v6 bool) string {
	if v6 {
		return fmt.Sprintf("fd00:%d:1::", 91+i)
	}
	return fmt.Sprintf("10.%d.1.", 91+i)
}

// routedBackendAddr is routed backend i's address.
func routedBackendAddr(i int, v6 bool) netip.Addr {
	return netip.MustParseAddr(routedSubnet(i, v6) + "11")
}

// BackendGateway is backend i's default gateway: the balancer, or its router when routed.
func (l *Lab) BackendGateway(i int, v6 bool) netip.Addr {
	if l.RoutedBackends {
		return netip.MustParseAddr(routedSubnet(i, v6) + "1")
	}
	return l.BalancerBackendSideAddr(v6)
}

// routedPairs are the router's links: to the bridge, and to each backend directly.
func (l *Lab) routedPairs() []vethPair {
	pairs := []vethPair{{endpoint{l.SwitchNS(), "router"}, endpoint{l.RouterNS(), "eth0"}, "br0"}}
	for i := 1; i <= l.Backends; i++ {
		pairs = append(pairs, vethPair{endpoint{l.RouterNS(), BackendName(i)}, endpoint{l.BackendNS(i), "eth0"}, ""})
	}
	return pairs
}

// routedAddrs are the router's addresses.
func (l *Lab) routedAddrs() []ifAddr {
	out := addrPair(l.RouterNS(), "eth0", 24, 64, l.RouterBridgeAddr)
	for i := 1; i <= l.Backends; i++ {
		out = append(out, addrPair(l.RouterNS(), BackendName(i), 24, 64, func(v6 bool) netip.Addr { return l.BackendGateway(i, v6) })...)
	}
	return out
}

// routedSetup sets up the router (forwarding, a default route to the balancer, VIP-sourced
// replies straight to the client's bypass address, the ecmp baseline's multipath route) and the
// balancer's routes to the backends' subnets through it.
func (l *Lab) routedSetup() error {
	if err := setSysctls(l.RouterNS(),
		sysctl{"net.ipv4.ip_forward", "1"},
		sysctl{"net.ipv6.conf.all.forwarding", "1"},
		sysctl{"net.ipv4.fib_multipath_hash_policy", "1"},
	); err != nil {
		return err
	}
	if err := WithHandle(l.RouterNS(), l.routerRoutes); err != nil {
		return fmt.Errorf("lab: the backends' router: %w", err)
	}
	return WithHandle(l.BalancerNS(), func(h *netlink.Handle) error {
		eth1, err := h.LinkByName("eth1")
		if err != nil {
			return err
		}
		for _, v6 := range []bool{false, true} {
			dst := []netip.Prefix{netip.MustParsePrefix(Anycast4 + "/32")}
			if v6 {
				dst = dst[:0]
			}
			for i := 1; i <= l.Backends; i++ {
				dst = append(dst, netip.PrefixFrom(routedBackendAddr(i, v6), map[bool]int{false: 24, true: 64}[v6]).Masked())
			}
			for _, d := range dst {
				r := &netlink.Route{LinkIndex: eth1.Attrs().Index, Dst: ipNet(d), Gw: l.RouterBridgeAddr(v6).AsSlice()}
				if err := h.RouteAdd(r); err != nil {
					return fmt.Errorf("lab: route %s via the backends' router: %w", d, err)
				}
			}
		}
		return nil
	})
}

// routerRoutes are the router's routes and rules, added through h.
func (l *Lab) routerRoutes(h *netlink.Handle) error {
	eth0, err := h.LinkByName("eth0")
	if err != nil {
		return err
	}
	anycast := &netlink.Route{Dst: ipNet(netip.MustParsePrefix(Anycast4 + "/32"))}
	for i := 1; i <= l.Backends; i++ {
		link, err := h.LinkByName(BackendName(i))
		if err != nil {
			return err
		}
		anycast.MultiPath = append(anycast.MultiPath, &netlink.NexthopInfo{LinkIndex: link.Attrs().Index, Gw: routedBackendAddr(i, false).AsSlice()})
	}
	if err := h.RouteAdd(anycast); err != nil {
		return fmt.Errorf("multipath route %s: %w", Anycast4, err)
	}
	for _, v6 := range []bool{false, true} {
		vipNet, family := netip.MustParsePrefix(VIPNet4), netlink.FAMILY_V4
		if v6 {
			vipNet, family = netip.MustParsePrefix(VIPNet6), netlink.FAMILY_V6
		}
		if err := h.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: l.BalancerBackendSideAddr(v6).AsSlice()}); err != nil {
			return fmt.Errorf("default route: %w", err)
		}
		bypass := l.ClientBypassAddr(v6)
		if err := h.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: bypass.AsSlice(), Table: dsrTable, Flags: int(netlink.FLAG_ONLINK)}); err != nil {
			return fmt.Errorf("table %d default via %s: %w", dsrTable, bypass, err)
		}
		rule := netlink.NewRule()
		rule.Family, rule.Src, rule.Table, rule.Priority = family, ipNet(vipNet), dsrTable, dsrTable
		if err := h.RuleAdd(rule); err != nil {
			return fmt.Errorf("rule from %s: %w", vipNet, err)
		}
	}
	return nil
}

// decapPinPath is where backend i's sluice decap pins its maps and links: under the pins Down
// removes with the namespace.
func (l *Lab) decapPinPath(i int) string {
	return filepath.Join(ebpf.NetnsPinPath(l.BackendNS(i)), "decap")
}

// startDecap attaches sluice decap to routed backend i's eth0 (again: its addresses refreshed).
func (l *Lab) startDecap(i int) error {
	if err := ebpf.MountBPFFS(); err != nil {
		return fmt.Errorf("lab: sluice decap on %s: %w", BackendName(i), err)
	}
	return inNS(l.BackendNS(i), func() error {
		o := decap.Options{PinPath: l.decapPinPath(i), Interface: "eth0", GUEPort: decap.DefaultGUEPort}
		if err := decap.Attach(o); err != nil {
			return fmt.Errorf("lab: sluice decap on %s: %w", BackendName(i), err)
		}
		return nil
	})
}

// vipSourcedGateway is where backend i sends what it answers from a VIP: the client's bypass
// address on the bridge, or its router (which sends it there) when routed.
func (l *Lab) vipSourcedGateway(i int, v6 bool) (netip.Addr, int) {
	if l.RoutedBackends {
		return l.BackendGateway(i, v6), 0
	}
	return l.ClientBypassAddr(v6), int(netlink.FLAG_ONLINK)
}
