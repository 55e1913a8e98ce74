package lab

// An attacker lab (Lab.Attacker, one balancer only) adds a namespace that floods the balancer
// from its own link, beside the client's:
//
//	attacker eth0 -- eth2 lb
//
// The balancer's default route points at the attacker, so replies to the forged sources of a
// flood (SYN-ACKs, cookies) leave the balancer and die there: the attacker does not forward.

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// AttackerNS is the attacker namespace's name (an attacker lab only).
func (l *Lab) AttackerNS() string { return l.Prefix + "-attacker" }

// AttackerAddr is the attacker's eth0 address (10.91.4.2).
func (l *Lab) AttackerAddr() netip.Addr { return netip.MustParseAddr("10.91.4.2") }

// BalancerAttackerSideAddr is the balancer's eth2 address, the attacker's gateway (10.91.4.1).
func (l *Lab) BalancerAttackerSideAddr() netip.Addr { return netip.MustParseAddr("10.91.4.1") }

// attackerPair is the attacker's link to the balancer.
func (l *Lab) attackerPair() vethPair {
	return vethPair{endpoint{l.AttackerNS(), "eth0"}, endpoint{l.BalancerNS(), "eth2"}, ""}
}

// attackerAddrs are the addresses of the attacker's link, IPv4 only.
func (l *Lab) attackerAddrs() []ifAddr {
	return []ifAddr{
		{endpoint{l.AttackerNS(), "eth0"}, netip.PrefixFrom(l.AttackerAddr(), 24)},
		{endpoint{l.BalancerNS(), "eth2"}, netip.PrefixFrom(l.BalancerAttackerSideAddr(), 24)},
	}
}

// attackerRoutes gives the attacker a default route via the balancer, and the balancer one via
// the attacker, where replies to forged sources end.
func (l *Lab) attackerRoutes() error {
	for _, r := range []struct {
		ns, dev string
		gw      netip.Addr
	}{
		{l.AttackerNS(), "eth0", l.BalancerAttackerSideAddr()},
		{l.BalancerNS(), "eth2", l.AttackerAddr()},
	} {
		if err := WithHandle(r.ns, func(h *netlink.Handle) error {
			link, err := h.LinkByName(r.dev)
			if err != nil {
				return err
			}
			return h.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Gw: r.gw.AsSlice()})
		}); err != nil {
			return fmt.Errorf("default route in %s via %s: %w", r.ns, r.gw, err)
		}
	}
	return nil
}
