package lab

// A fleet lab (Balancers >= 2) puts a router between the client and the balancers:
//
//	client eth0 -- eth0 router eth1 -- br1 -- eth0 lb1..lbN eth1 -- br0 -- backends
//	                       router eth2 ------------------------------ br0
//
// The router (BIRD, router.go) learns the VIPs from the balancers over BGP and spreads them by
// ECMP; the backends' gateway is the router's eth2, and DSR replies still take the client's
// bypass leg on br0.

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
)

// The switch namespace's ports of the router and of balancer i.
const (
	routerFrontPort = "router-front"
	routerBackPort  = "router-back"
)

func balancerFrontPort(i int) string { return fmt.Sprintf("lb%d-front", i) }
func balancerBackPort(i int) string  { return fmt.Sprintf("lb%d-back", i) }

func (l *Lab) routerPairs() []vethPair {
	sw, rt := l.SwitchNS(), l.RouterNS()
	return []vethPair{
		{endpoint{l.ClientNS(), "eth0"}, endpoint{rt, "eth0"}, ""},
		{endpoint{sw, routerFrontPort}, endpoint{rt, "eth1"}, "br1"},
		{endpoint{sw, routerBackPort}, endpoint{rt, "eth2"}, "br0"},
	}
}

func (l *Lab) balancerPairs() []vethPair {
	sw := l.SwitchNS()
	var pairs []vethPair
	for i := 1; i <= l.Balancers; i++ {
		pairs = append(pairs,
			vethPair{endpoint{sw, balancerFrontPort(i)}, endpoint{l.BalancerNSOf(i), "eth0"}, "br1"},
			vethPair{endpoint{sw, balancerBackPort(i)}, endpoint{l.BalancerNSOf(i), "eth1"}, "br0"})
	}
	return pairs
}

func (l *Lab) fleetAddrs() []ifAddr {
	rt := l.RouterNS()
	out := slices.Concat(
		addrPair(rt, "eth0", 24, 64, l.BalancerClientSideAddr),
		addrPair(rt, "eth1", 24, 64, l.RouterFrontAddr),
		addrPair(rt, "eth2", 24, 64, l.BalancerBackendSideAddr))
	for i := 1; i <= l.Balancers; i++ {
		out = slices.Concat(out,
			addrPair(l.BalancerNSOf(i), "eth0", 24, 64, func(v6 bool) netip.Addr { return l.BalancerFrontAddr(i, v6) }),
			addrPair(l.BalancerNSOf(i), "eth1", 24, 64, func(v6 bool) netip.Addr { return l.BalancerBackSideAddr(i, v6) }))
	}
	return out
}

// liberalTCP is on in every balancer: a node whose conntrack entries move to and from a peer
// (conntrackd, docs/ha.md) must not check TCP windows, and the sync section refuses it otherwise;
// the bench's balancer has it too, so that a candidate with replication on and one without
// differ only by it.
var liberalTCP = sysctl{"net.netfilter.nf_conntrack_tcp_be_liberal", "1"}

// fleetSetup makes the router the client's and the backends' gateway, hashing ports into its
// multipath routes for both families, and gives every balancer forwarding and a default route
// via the router.
func (l *Lab) fleetSetup() error {
	if err := l.gatewaySetup(l.RouterNS(), "eth2", sysctl{"net.ipv6.fib_multipath_hash_policy", "1"}); err != nil {
		return err
	}
	for i := 1; i <= l.Balancers; i++ {
		ns := l.BalancerNSOf(i)
		if err := setSysctls(ns,
			sysctl{"net.ipv4.ip_forward", "1"},
			sysctl{"net.ipv6.conf.all.forwarding", "1"},
			liberalTCP,
		); err != nil {
			return err
		}
		if err := WithHandle(ns, func(h *netlink.Handle) error {
			eth0, err := h.LinkByName("eth0")
			if err != nil {
				return err
			}
			for _, v6 := range []bool{false, true} {
				gw := l.RouterFrontAddr(v6)
				if err := h.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: gw.AsSlice()}); err != nil {
					return fmt.Errorf("default route via %s: %w", gw, err)
				}
			}
			return nil
		}); err != nil {
			return fmt.Errorf("%s: %w", ns, err)
		}
	}
	return nil
}

// CutBalancer takes fleet balancer i off the network by setting its front and back switch
// ports down: a node dying as its neighbours see it, with no FIN and no RST, so the router
// notices only by the BGP hold timer. The balancer's namespace and processes are untouched.
func (l *Lab) CutBalancer(i int) error {
	return l.setBalancerPorts(context.Background(), i, false)
}

// RestoreBalancer sets fleet balancer i's switch ports up again and waits until they forward.
func (l *Lab) RestoreBalancer(i int) error {
	return l.setBalancerPorts(context.Background(), i, true)
}

func (l *Lab) setBalancerPorts(ctx context.Context, i int, up bool) error {
	if !l.fleet() || i < 1 || i > l.Balancers {
		return fmt.Errorf("lab: no fleet balancer %d", i)
	}
	ports := []string{balancerFrontPort(i), balancerBackPort(i)}
	err := WithHandle(l.SwitchNS(), func(h *netlink.Handle) error {
		for _, port := range ports {
			link, err := h.LinkByName(port)
			if err != nil {
				return err
			}
			if up {
				err = h.LinkSetUp(link)
			} else {
				err = h.LinkSetDown(link)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", port, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("lab: balancer %d ports: %w", i, err)
	}
	if !up {
		return nil
	}
	return waitOperUp(ctx, map[string][]string{l.SwitchNS(): ports, l.BalancerNSOf(i): {"eth0", "eth1"}})
}
