package bench

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/lab"
)

// TestFleetFailoverEvents checks that every fleet event is named fleet-..., has an action, and
// that no name is both a pair's and a fleet's event.
func TestFleetFailoverEvents(t *testing.T) {
	for _, name := range FleetFailoverEvents {
		if !strings.HasPrefix(name, "fleet-") {
			t.Errorf("fleet event %q is not named fleet-...", name)
		}
		if fleetFailoverEvent(name).act == nil {
			t.Errorf("fleet event %q has no action", name)
		}
		if slices.Contains(FailoverEvents, name) {
			t.Errorf("%q is both a pair's and a fleet's event", name)
		}
	}
	for _, name := range FailoverEvents {
		if failoverEvent(name).act == nil {
			t.Errorf("pair event %q has no action", name)
		}
	}
}

// TestFailoverOptionsEvents checks that --events takes the pair's and the fleet's events, mixed,
// and refuses an unknown one naming the flag.
func TestFailoverOptionsEvents(t *testing.T) {
	o := FailoverOptions{Datapaths: []string{"nft"}, Modes: []string{"dsr"}, Conns: 1, NewRate: 1}
	for _, events := range [][]string{FailoverEvents, FleetFailoverEvents, {"fleet-drain", "node-death"}} {
		o.Events = events
		if err := o.Check(); err != nil {
			t.Errorf("events %v: %v", events, err)
		}
	}
	o.Events = []string{"fleet-vrrp-takeover"}
	if err := o.Check(); err == nil || !strings.Contains(err.Error(), "--events") {
		t.Errorf("an unknown fleet event: %v, want an error naming --events", err)
	}
	pairEvents, fleetEvents := splitEvents([]string{"fleet-rejoin", "drain", "fleet-drain"})
	if !slices.Equal(pairEvents, []string{"drain"}) || !slices.Equal(fleetEvents, []string{"fleet-rejoin", "fleet-drain"}) {
		t.Errorf("splitEvents: pair %v, fleet %v", pairEvents, fleetEvents)
	}
}

// TestFleetFailoverConfig checks a fleet node's config: it parses, peers with the router with
// BFD, replicates to the other node, and for fullnat translates to the node's own source with
// every node's in bgp.fullnat_sources.
func TestFleetFailoverConfig(t *testing.T) {
	l := lab.New("sltest", 3)
	l.Balancers = 2
	for _, mode := range []string{"dsr", "fullnat"} {
		c, err := config.Parse("node2.yaml", []byte(fleetFailoverConfig(l, "ebpf", mode, 2, "/etc/sluice/sync.key")))
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		if c.BGP == nil || len(c.BGP.Peers) != 1 || !c.BGP.Peers[0].BFD {
			t.Fatalf("%s: no BGP peer with BFD: %+v", mode, c.BGP)
		}
		if c.Sync == nil || len(c.Sync.Peers) != 1 {
			t.Fatalf("%s: no sync to the other node: %+v", mode, c.Sync)
		}
		svc := c.Services[0]
		if mode == "fullnat" {
			if got := svc.FullNATSource.String(); got != fleetFullNATSource(2).String() {
				t.Errorf("fullnat source %s, want node 2's %s", got, fleetFullNATSource(2))
			}
			if len(c.BGP.FullNATSources) != 2 {
				t.Errorf("bgp.fullnat_sources %v, want both nodes'", c.BGP.FullNATSources)
			}
		} else if len(c.BGP.FullNATSources) != 0 {
			t.Errorf("dsr announces fullnat sources %v", c.BGP.FullNATSources)
		}
	}
}

// TestFleetRoutes checks the routes the router has with some nodes up: the VIP over them, and
// each fullnat source to its node, or to a survivor when its node is out.
func TestFleetRoutes(t *testing.T) {
	l := lab.New("sltest", 3)
	l.Balancers = 2
	front := func(i int) []netip.Addr { return []netip.Addr{l.BalancerFrontAddr(i, false)} }
	src := func(i int) netip.Prefix { return netip.PrefixFrom(fleetFullNATSource(i), 32) }
	both := fleetRoutes(l, true, 1, 2)
	if !slices.Equal(both[fleetVIP], append(front(1), front(2)...)) || !slices.Equal(both[src(1)], front(1)) || !slices.Equal(both[src(2)], front(2)) {
		t.Errorf("both up: %v", both)
	}
	one := fleetRoutes(l, true, 1)
	if !slices.Equal(one[fleetVIP], front(1)) || !slices.Equal(one[src(2)], front(1)) {
		t.Errorf("node 2 out: %v", one)
	}
	if dsr := fleetRoutes(l, false, 1); len(dsr) != 1 {
		t.Errorf("dsr waits for routes other than the VIP's: %v", dsr)
	}
}

// TestFailoverTableFleet checks the fleet's rows: measured cells as the pair's, nat's cells
// "unsupported" with the reason said once, the connections through node 2 per measured cell, and
// the broken ones explained with route changes.
func TestFailoverTableFleet(t *testing.T) {
	r := &FailoverResults{
		Options:  FailoverOptions{Datapaths: []string{"nft", "ebpf"}, Modes: []string{"nat", "dsr"}, Events: []string{"node-death", "fleet-node-death"}, Conns: 2, NewRate: 1},
		Backends: 3,
		Cells: []FailoverCell{
			{Event: "fleet-node-death", Datapath: "nft", Mode: "nat", Unsupported: natBehindECMP},
			{Event: "fleet-node-death", Datapath: "nft", Mode: "dsr", LongLived: 2, LongLivedOnNode: 1, Total: 30, ReconvergeS: 0.31},
			{Event: "fleet-node-death", Datapath: "ebpf", Mode: "nat", Unsupported: natBehindECMP},
			{Event: "fleet-node-death", Datapath: "ebpf", Mode: "dsr", LongLived: 2, LongLivedBroken: 1, LongLivedOnNode: 2, NewConns: 28, Broken: 1, Total: 30,
				ReconvergeS: 0.33, RouteChanges: 1, Errors: []string{"long-lived: reset"}},
		},
	}
	out := r.Table()
	for _, want := range []string{"BGP/ECMP fleet", "0/30 (0.3s)", "1/30 (0.3s)",
		"fleet-node-death ebpf-dsr: 1 of 2 long-lived, 0 of 28 new; route changes 1; long-lived: reset",
		"unsupported (nft-nat, ebpf-nat, not measured): nat behind ECMP",
		"through node 2", "  fleet-node-death: nft-dsr 1/2, ebpf-dsr 2/2\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
	var row string
	for line := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "fleet-node-death ") && !strings.Contains(line, ":") {
			row = line
		}
	}
	if got := strings.Join(strings.Fields(row), " "); got != "fleet-node-death unsupported 0/30 (0.3s) unsupported 1/30 (0.3s)" {
		t.Errorf("the fleet row is %q", got)
	}
	if strings.Count(out, "nat behind ECMP") != 1 {
		t.Errorf("the reason nat is not measured is not said exactly once:\n%s", out)
	}
}

// TestNextHop checks the gateway read from `ip route get`'s answer.
func TestNextHop(t *testing.T) {
	for route, want := range map[string]string{
		"10.91.9.100 from 10.91.1.2 via 10.91.3.12 dev eth1 \n    cache iif eth0 \n": "10.91.3.12",
		"local 10.91.9.100 dev lo src 10.91.9.100":                                   "",
		"via": "",
		"":    "",
	} {
		if got := nextHop(route); got != want {
			t.Errorf("nextHop(%q) = %q, want %q", route, got, want)
		}
	}
}
