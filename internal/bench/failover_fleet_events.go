package bench

// The fleet's events (the fleet-... rows of bench failover): each befalls node 2 of the two nodes
// the router spreads the VIP over, and the fleet has reconverged when the router's routes are
// those of the nodes then up (fleetRoutes).

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/sluicelb/sluice/internal/lab"
)

// FleetFailoverEvents are the fleet's events bench failover runs, in the table's order.
var FleetFailoverEvents = []string{"fleet-node-death", "fleet-drain", "fleet-rejoin", "fleet-daemon-restart", "fleet-backends-change"}

// fleetNode is the node the fleet's events befall; the other one stays up.
const fleetNode = 2

// fleetEvent is one fleet row: prepare (optional) runs before the load and is not counted; act
// runs the event under load and returns the reconvergence, and for a drain the time back.
// countAfter: the long-lived connections on the node are counted after the event (the node is
// out before it), else before it.
type fleetEvent struct {
	prepare    func(ctx context.Context, f ecmpFleet) error
	act        func(ctx context.Context, f ecmpFleet) (reconverge, back time.Duration, err error)
	countAfter bool
}

// fleetFailoverEvent is the fleet event named name (one of FleetFailoverEvents).
func fleetFailoverEvent(name string) fleetEvent {
	return map[string]fleetEvent{
		"fleet-node-death":      {act: fleetNodeDeath},
		"fleet-drain":           {act: fleetDrain},
		"fleet-rejoin":          {prepare: fleetNodeDown, act: fleetRejoin, countAfter: true},
		"fleet-daemon-restart":  {act: fleetDaemonRestart},
		"fleet-backends-change": {act: fleetBackendsChange},
	}[name]
}

// survivorOnly waits until the router routes as if only the other node were up, and returns how
// long that took.
func (f ecmpFleet) survivorOnly(ctx context.Context) (time.Duration, error) {
	return f.waitRoutes(ctx, moveLimit, 3-fleetNode)
}

// bothUp waits until the router routes over both nodes again, and returns how long that took.
func (f ecmpFleet) bothUp(ctx context.Context) (time.Duration, error) {
	return f.waitRoutes(ctx, restoreLimit, 1, 2)
}

// fleetNodeDeath: the node's links cut and its daemon killed (no goodbye: the router's BFD
// notices); reconverged when the router routes via the other node only.
func fleetNodeDeath(ctx context.Context, f ecmpFleet) (time.Duration, time.Duration, error) {
	took, err := during(func() error { return f.killNode(fleetNode) }, func() error {
		_, err := f.survivorOnly(ctx)
		return err
	})
	return took, 0, err
}

// fleetNodeDown prepares the rejoin: the node dies and the router routes via the other one.
func fleetNodeDown(ctx context.Context, f ecmpFleet) error {
	if err := f.killNode(fleetNode); err != nil {
		return err
	}
	_, err := f.survivorOnly(ctx)
	return err
}

// fleetRejoin: the dead node comes back on the network and its daemon starts; it announces once
// its initial sync from the other node is in; reconverged when the router routes over both, and
// the flows ECMP then moves to it are in its tables.
func fleetRejoin(ctx context.Context, f ecmpFleet) (time.Duration, time.Duration, error) {
	start := time.Now()
	if err := errors.Join(f.e.Lab.RestoreBalancer(fleetNode), f.startDaemon(fleetNode)); err != nil {
		return 0, 0, err
	}
	_, err := f.bothUp(ctx)
	return time.Since(start), 0, err
}

// fleetDrain: the node is drained (sluice node drain: it withdraws its VIPs and its fullnat
// source), stays drained drainHold, and is undrained; the times until the router routes via the
// other node only, and from the undrain until it routes over both again.
func fleetDrain(ctx context.Context, f ecmpFleet) (time.Duration, time.Duration, error) {
	took, err := during(func() error { return f.cli(ctx, fleetNode, "node", "drain", "--no-wait") }, func() error {
		_, err := f.survivorOnly(ctx)
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	if err := sleep(ctx, drainHold); err != nil {
		return 0, 0, err
	}
	start := time.Now()
	if err := f.cli(ctx, fleetNode, "node", "undrain"); err != nil {
		return 0, 0, err
	}
	_, err = f.bothUp(ctx)
	return took, time.Since(start), err
}

// fleetDaemonRestart: the node's daemon is stopped (SIGTERM: it withdraws, waits its shutdown
// grace and exits) and started again; reconverged when the router routes over both again.
func fleetDaemonRestart(ctx context.Context, f ecmpFleet) (time.Duration, time.Duration, error) {
	start := time.Now()
	f.daemons[fleetNode-1].stop()
	if _, err := f.survivorOnly(ctx); err != nil {
		return 0, 0, fmt.Errorf("after the stop: %w", err)
	}
	if err := f.startDaemon(fleetNode); err != nil {
		return 0, 0, err
	}
	_, err := f.bothUp(ctx)
	return time.Since(start), 0, err
}

// fleetBackendsChange: 30% of the backends change while the node dies; reconverged (from the
// death) when the router routes via the other node only.
func fleetBackendsChange(ctx context.Context, f ecmpFleet) (time.Duration, time.Duration, error) {
	return f.changeBackendsWhileDying(ctx, fleetNode, func() error {
		_, err := f.survivorOnly(ctx)
		return err
	})
}

// runCell runs the fleet event named name under load (measure), and counts the long-lived
// connections the router sends through the node the event befalls.
func (f ecmpFleet) runCell(ctx context.Context, name string, o FailoverOptions, ports *portRanges) (FailoverCell, error) {
	ev := fleetFailoverEvent(name)
	if ev.prepare != nil {
		if err := ev.prepare(ctx, f); err != nil {
			return FailoverCell{}, fmt.Errorf("preparing: %w", err)
		}
	}
	var (
		local []netip.AddrPort
		on    int
		onErr error
	)
	countOn := func() { on, onErr = f.onNode(ctx, fleetNode, local) }
	run := cellRun{watch: f.watchRoutes,
		opened: func(l []netip.AddrPort) {
			local = l
			if !ev.countAfter {
				countOn()
			}
		},
		act: func() (time.Duration, time.Duration, error) {
			reconverge, back, err := ev.act(ctx, f)
			if err == nil && ev.countAfter {
				countOn()
			}
			return reconverge, back, err
		}}
	c, changes, err := measure(ctx, f.e.Lab, o, ports, run)
	if err := errors.Join(err, onErr); err != nil {
		return FailoverCell{}, err
	}
	c.Event, c.Datapath, c.Mode, c.RouteChanges, c.LongLivedOnNode = name, f.datapath, f.mode, changes, on
	return c, nil
}

// onNode counts the connections from the client's ends local to the VIP that the router sends
// through node i, as its `ip route get` with their ports (the ECMP hash) says.
func (f ecmpFleet) onNode(ctx context.Context, i int, local []netip.AddrPort) (int, error) {
	via := f.e.Lab.BalancerFrontAddr(i, false).String()
	n := 0
	for _, a := range local {
		out, err := f.e.Lab.Exec(ctx, f.e.Lab.RouterNS(), "ip", "route", "get", lab.VIP4, "from", a.Addr().String(), "iif", "eth0",
			"ipproto", "tcp", "sport", fmt.Sprint(a.Port()), "dport", fmt.Sprint(vipPort)).Output()
		if err != nil {
			return 0, fmt.Errorf("ip route get on the router: %w", err)
		}
		if nextHop(string(out)) == via {
			n++
		}
	}
	return n, nil
}

// nextHop is the gateway (after "via") in `ip route get`'s answer, or "".
func nextHop(route string) string {
	fields := strings.Fields(route)
	for k, w := range fields[:max(len(fields)-1, 0)] {
		if w == "via" {
			return fields[k+1]
		}
	}
	return ""
}
