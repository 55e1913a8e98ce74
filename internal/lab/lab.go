// Package lab builds a network-namespace test bed for Sluice: a client, a
// balancer, a bridge "switch" and N nginx backends, all in named network
// namespaces that never get a link to the root namespace. A fleet lab puts a
// BIRD router between the client and several balancers (see fleet.go).
package lab

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
)

// Default demo VIPs and the VIP ranges that backends accept locally (DSR).
const (
	VIP4    = "10.91.9.100"
	VIP6    = "fd00:91:9::100"
	VIPNet4 = "10.91.9.0/24"
	VIPNet6 = "fd00:91:9::/64"
)

// Anycast4 is an address every backend holds on lo and the balancer namespace routes to all
// of them by one multipath route hashed on the 5-tuple: plain kernel routing that spreads
// connections over the backends the way a balancer does, with no balancer (the ecmp baseline
// of `sluice-lab bench lb`). Replies go back through the balancer namespace, as for nat.
const Anycast4 = "10.91.8.1"

// MaxBackends is the largest backend count a lab supports.
const MaxBackends = 99

// MaxBalancers is the largest balancer count a lab supports.
const MaxBalancers = 8

// The AS numbers of a fleet lab's router and of its balancers.
const (
	RouterASN   = 65000
	BalancerASN = 65100
)

// Lab describes one lab instance (its namespaces, addresses and state dir).
type Lab struct {
	// Prefix names the namespaces: {Prefix}-client, -lb, -sw, -b1..-bN.
	Prefix string
	// Backends is the number of backends (1..MaxBackends).
	Backends int
	// Balancers is the number of balancers (1..MaxBalancers); from 2 on, the lab is a fleet: a
	// BIRD router in {Prefix}-router spreads the VIPs over {Prefix}-lb1..-lbN by ECMP.
	Balancers int
	// RoutedBackends puts the backends behind a router on subnets of their own (routed.go); one
	// balancer only.
	RoutedBackends bool
	// Attacker adds {Prefix}-attacker, linked to the balancer (attacker.go); one balancer only.
	Attacker bool
	// BFD, in a fleet, runs BFD on the router's sessions to the balancers (router.go).
	BFD *BFD
	// StateDir holds nginx configs, pid files, logs and static files.
	StateDir string
	// UDPResponderCmd returns the argv of a UDP responder on port 5353 that
	// answers with the given backend name (e.g. "b2"); nil starts none.
	UDPResponderCmd func(reply string) []string
}

// New returns a one-balancer lab with the given prefix ("sluice" when empty) and backend count,
// which Up, Down and Status refuse outside 1..MaxBackends. Set Balancers for a fleet.
func New(prefix string, backends int) *Lab {
	if prefix == "" {
		prefix = "sluice"
	}
	return &Lab{Prefix: prefix, Backends: backends, Balancers: 1, StateDir: filepath.Join("/run/sluice-lab", prefix)}
}

var prefixRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$`)

func (l *Lab) validate() error {
	if !prefixRE.MatchString(l.Prefix) {
		return fmt.Errorf("lab: invalid prefix %q", l.Prefix)
	}
	if l.Backends < 1 || l.Backends > MaxBackends {
		return fmt.Errorf("lab: backends must be 1..%d, got %d", MaxBackends, l.Backends)
	}
	if l.Balancers < 1 || l.Balancers > MaxBalancers {
		return fmt.Errorf("lab: balancers must be 1..%d, got %d", MaxBalancers, l.Balancers)
	}
	if l.RoutedBackends && l.fleet() {
		return fmt.Errorf("lab: routed backends need a lab of one balancer, got %d", l.Balancers)
	}
	if l.Attacker && l.fleet() {
		return fmt.Errorf("lab: an attacker needs a lab of one balancer, got %d", l.Balancers)
	}
	if err := l.validateBFD(); err != nil {
		return err
	}
	if !filepath.IsAbs(l.StateDir) {
		return fmt.Errorf("lab: state dir %q is not absolute", l.StateDir)
	}
	return nil
}

// ClientNS is the client namespace name.
func (l *Lab) ClientNS() string { return l.Prefix + "-client" }

// fleet reports whether the lab has a router and several balancers.
func (l *Lab) fleet() bool { return l.Balancers > 1 }

// BalancerNS is the (first) load balancer's namespace name.
func (l *Lab) BalancerNS() string { return l.BalancerNSOf(1) }

// BalancerNSOf is balancer i's namespace name (1-based): {Prefix}-lb in a one-balancer lab,
// {Prefix}-lb{i} in a fleet.
func (l *Lab) BalancerNSOf(i int) string {
	if !l.fleet() {
		return l.Prefix + "-lb"
	}
	return fmt.Sprintf("%s-lb%d", l.Prefix, i)
}

// RouterNS is the namespace of a fleet lab's BIRD router.
func (l *Lab) RouterNS() string { return l.Prefix + "-router" }

// SwitchNS is the namespace holding the backend-side bridge.
func (l *Lab) SwitchNS() string { return l.Prefix + "-sw" }

// BackendNS is the namespace name of backend i (1-based).
func (l *Lab) BackendNS(i int) string { return fmt.Sprintf("%s-b%d", l.Prefix, i) }

// BackendName is the short name of backend i ("b1"), also its HTTP and UDP reply.
func BackendName(i int) string { return fmt.Sprintf("b%d", i) }

// Namespaces lists every namespace of the lab in creation order.
func (l *Lab) Namespaces() []string {
	ns := []string{l.ClientNS(), l.BalancerNS(), l.SwitchNS()}
	if l.fleet() {
		ns = []string{l.ClientNS(), l.RouterNS(), l.SwitchNS()}
		for i := 1; i <= l.Balancers; i++ {
			ns = append(ns, l.BalancerNSOf(i))
		}
	}
	if l.RoutedBackends {
		ns = append(ns, l.RouterNS())
	}
	if l.Attacker {
		ns = append(ns, l.AttackerNS())
	}
	for i := 1; i <= l.Backends; i++ {
		ns = append(ns, l.BackendNS(i))
	}
	return ns
}

func pick(v6 bool, a4, a6 string) netip.Addr {
	if v6 {
		return netip.MustParseAddr(a6)
	}
	return netip.MustParseAddr(a4)
}

// ClientAddr is the client's address on its eth0 (10.91.1.2).
func (l *Lab) ClientAddr(v6 bool) netip.Addr { return pick(v6, "10.91.1.2", "fd00:91:1::2") }

// ClientBypassAddr is the client's byp0 address on the backend bridge, the DSR return next hop (10.91.2.2).
func (l *Lab) ClientBypassAddr(v6 bool) netip.Addr { return pick(v6, "10.91.2.2", "fd00:91:2::2") }

// BalancerClientSideAddr is the balancer's eth0 address, the client's gateway (10.91.1.1); the
// router's eth0 in a fleet.
func (l *Lab) BalancerClientSideAddr(v6 bool) netip.Addr {
	return pick(v6, "10.91.1.1", "fd00:91:1::1")
}

// BalancerBackendSideAddr is the balancer's eth1 address, the backends' gateway (10.91.2.1); the
// router's eth2 in a fleet.
func (l *Lab) BalancerBackendSideAddr(v6 bool) netip.Addr {
	return pick(v6, "10.91.2.1", "fd00:91:2::1")
}

// BackendAddr is backend i's eth0 address (10.91.2.(10+i), fd00:91:2::(10+i); routed:
// 10.(91+i).1.11, fd00:(91+i):1::11); invalid if i is out of range.
func (l *Lab) BackendAddr(i int, v6 bool) netip.Addr {
	if i < 1 || i > l.Backends {
		return netip.Addr{}
	}
	if l.RoutedBackends {
		return routedBackendAddr(i, v6)
	}
	return pick(v6, fmt.Sprintf("10.91.2.%d", 10+i), fmt.Sprintf("fd00:91:2::%d", 10+i))
}

// RouterFrontAddr is a fleet router's eth1 address on the front bridge, the balancers' gateway and
// BGP peer (10.91.3.1, fd00:91:3::1).
func (l *Lab) RouterFrontAddr(v6 bool) netip.Addr { return pick(v6, "10.91.3.1", "fd00:91:3::1") }

// BalancerFrontAddr is fleet balancer i's eth0 address on the front bridge (10.91.3.(10+i),
// fd00:91:3::(10+i)); invalid if i is out of range.
func (l *Lab) BalancerFrontAddr(i int, v6 bool) netip.Addr {
	if i < 1 || i > l.Balancers {
		return netip.Addr{}
	}
	return pick(v6, fmt.Sprintf("10.91.3.%d", 10+i), fmt.Sprintf("fd00:91:3::%d", 10+i))
}

// BalancerBackSideAddr is fleet balancer i's eth1 address on the backend bridge (10.91.2.(200+i),
// fd00:91:2::(200+i)); invalid if i is out of range.
func (l *Lab) BalancerBackSideAddr(i int, v6 bool) netip.Addr {
	if i < 1 || i > l.Balancers {
		return netip.Addr{}
	}
	return pick(v6, fmt.Sprintf("10.91.2.%d", 200+i), fmt.Sprintf("fd00:91:2::%d", 200+i))
}

func (l *Lab) backendDir(i int) string { return filepath.Join(l.StateDir, BackendName(i)) }
