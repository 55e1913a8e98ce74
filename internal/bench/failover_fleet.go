package bench

// The BGP/ECMP fleet bench failover runs its fleet-... events in: fleet nodes 1 and 2 behind the
// lab's BIRD router (BFD on its sessions), one config each (the web service in one mode, BGP to
// the router with BFD, a sync section over the backends' side, and for fullnat a source of the
// node's own that every node announces, docs/scale-out.md).

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/lab"
)

// FleetFailoverModes are the modes the fleet events measure: nat needs the backends' replies to
// come back through the node that translated the request, which ECMP does not make so
// (docs/scale-out.md), so its fleet cells say why instead.
var FleetFailoverModes = []config.Mode{config.ModeFullNAT, config.ModeDSR}

// natBehindECMP is what a fleet nat cell says instead of a measurement.
const natBehindECMP = "nat behind ECMP is unsupported (docs/scale-out.md): the backends answer through their own " +
	"gateway, the router, which hands the replies to the client untranslated, so every connection fails"

// The fleet's BGP: the hold time the nodes offer (BGP's smallest, the detection without BFD).
const fleetFailoverHold = "3s"

// fleetFullNATSource is node i's fullnat source, which it announces over BGP (the other node as a
// backup route).
func fleetFullNATSource(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 91, 5, byte(i)}) }

// fleetFailoverConfig is fleet node i's config: the pair's (nodeConfig: the web service, its
// sync section) with BGP to the router with BFD, and for fullnat the node's own source, every
// node's in bgp.fullnat_sources.
func fleetFailoverConfig(l *lab.Lab, datapath, mode string, i int, secretFile string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "bgp:\n  asn: %d\n  shutdown_grace: 1s\n", lab.BalancerASN)
	if mode == string(config.ModeFullNAT) {
		fmt.Fprintf(&b, "  fullnat_sources: [%s, %s]\n", fleetFullNATSource(1), fleetFullNATSource(2))
	}
	fmt.Fprintf(&b, "  peers:\n    - {address: %s, asn: %d, hold_time: %s, bfd: true, bfd_interval: %dms, bfd_multiplier: %d}\n",
		l.RouterFrontAddr(false), lab.RouterASN, fleetFailoverHold, lab.DefaultBFDInterval.Milliseconds(), lab.DefaultBFDMultiplier)
	return nodeConfig(l, datapath, mode, i, secretFile, fleetFullNATSource(i), b.String())
}

// ecmpFleet is Sluice on fleet nodes 1 and 2, announcing the VIP to the router: the pair's two
// nodes without keepalived.
type ecmpFleet struct{ *pair }

// startFleetPair writes both nodes' configs, clears the nodes, starts both daemons and returns
// once both are ready and the router routes over both.
func (e *Env) startFleetPair(ctx context.Context, dp, mode string) (f ecmpFleet, err error) {
	p := &pair{e: e, datapath: dp, mode: mode, dir: filepath.Join(e.Dir(), "fleet-"+dp+"-"+mode), bins: [2]string{e.Sluice, e.Sluice}}
	f = ecmpFleet{p}
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		return f, err
	}
	secret := filepath.Join(p.dir, "sync.key")
	if err := os.WriteFile(secret, []byte(syncSecret), 0o600); err != nil {
		return f, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, f.stop(context.WithoutCancel(ctx)))
		}
	}()
	for i := 1; i <= 2; i++ {
		p.configs[i-1] = filepath.Join(p.dir, fmt.Sprintf("node%d.yaml", i))
		p.sockets[i-1] = filepath.Join(p.dir, fmt.Sprintf("node%d.sock", i))
		if err := os.WriteFile(p.configs[i-1], []byte(fleetFailoverConfig(e.Lab, dp, mode, i, secret)), 0o644); err != nil {
			return f, err
		}
		if err := e.resetNode(ctx, e.Lab.BalancerNSOf(i)); err != nil {
			return f, err
		}
		if err := p.startDaemon(i); err != nil {
			return f, err
		}
	}
	for i := 1; i <= 2; i++ {
		if err := p.waitReady(ctx, i, readyLimit); err != nil {
			return f, err
		}
	}
	_, err = f.waitRoutes(ctx, announceLimit, 1, 2)
	return f, err
}

// stop ends both daemons (each withdraws, waits its shutdown grace and exits), puts both nodes
// back on the network and clears them.
func (f ecmpFleet) stop(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, d := range f.daemons {
		if d != nil {
			wg.Go(d.stop)
		}
	}
	wg.Wait()
	var errs []error
	for i := 1; i <= 2; i++ {
		errs = append(errs, f.e.Lab.RestoreBalancer(i), f.e.resetNode(ctx, f.e.Lab.BalancerNSOf(i)))
	}
	return errors.Join(errs...)
}

// restore brings the fleet back to where every cell starts: both nodes on the network, both
// daemons running, ready and undrained with every backend's weight 1, the router routing over both.
func (f ecmpFleet) restore(ctx context.Context) error {
	for i := 1; i <= 2; i++ {
		if err := f.e.Lab.RestoreBalancer(i); err != nil {
			return err
		}
		if !f.running(i) {
			if err := f.startDaemon(i); err != nil {
				return err
			}
		}
		if err := f.waitAnswers(ctx, i); err != nil {
			return err
		}
		if err := f.setWeights(ctx, i, 1, f.changedBackends()); err != nil {
			return err
		}
		if err := f.cli(ctx, i, "node", "undrain"); err != nil {
			return err
		}
		if err := f.waitReady(ctx, i, readyLimit); err != nil {
			return err
		}
	}
	_, err := f.waitRoutes(ctx, restoreLimit, 1, 2)
	return err
}

// fleetRoutes are the router's routes with the fleet's nodes up (the others dead, drained or
// stopped): the VIP over each of up, and for fullnat each node's source to that node if up,
// else to the first of up (its backup route). up is sorted and not empty.
func fleetRoutes(l *lab.Lab, fullnat bool, up ...int) map[netip.Prefix][]netip.Addr {
	var fronts []netip.Addr
	for _, i := range up {
		fronts = append(fronts, l.BalancerFrontAddr(i, false))
	}
	want := map[netip.Prefix][]netip.Addr{fleetVIP: fronts}
	if !fullnat {
		return want
	}
	for i := 1; i <= 2; i++ {
		via := up[0]
		if slices.Contains(up, i) {
			via = i
		}
		want[netip.PrefixFrom(fleetFullNATSource(i), 32)] = []netip.Addr{l.BalancerFrontAddr(via, false)}
	}
	return want
}

// waitRoutes waits until the router's routes are those of nodes up (fleetRoutes), up to limit,
// and returns how long that took; its error says the routes the router has and the nodes' logs.
func (f ecmpFleet) waitRoutes(ctx context.Context, limit time.Duration, up ...int) (time.Duration, error) {
	want := fleetRoutes(f.e.Lab, f.mode == string(config.ModeFullNAT), up...)
	took, err := f.poll(ctx, limit, fmt.Sprintf("router routes via node(s) %v", up), func() (bool, error) {
		for prefix, hops := range want {
			got, err := f.e.Lab.RouterNextHops(prefix)
			if err != nil || !slices.Equal(got, hops) {
				return false, err
			}
		}
		return true, nil
	})
	if err != nil && ctx.Err() == nil {
		var got []string
		for prefix := range want {
			hops, _ := f.e.Lab.RouterNextHops(prefix)
			got = append(got, fmt.Sprintf("%s via %v", prefix, hops))
		}
		slices.Sort(got)
		err = fmt.Errorf("%w (the router has %s)%s%s", err, strings.Join(got, ", "), f.lastLogs(1), f.lastLogs(2))
	}
	return took, err
}

// watchRoutes counts the changes of the router's next hops for the VIP.
func (f ecmpFleet) watchRoutes() func() int {
	return watchChanges(func() ([]netip.Addr, error) { return f.e.Lab.RouterNextHops(fleetVIP) },
		func(last, now []netip.Addr) int {
			if slices.Equal(last, now) {
				return 0
			}
			return 1
		})
}

// benchFleetPair runs every fleet event on one datapath and mode; nat gets cells that say why
// it is not measured.
func (e *Env) benchFleetPair(ctx context.Context, dp, mode string, events []string, o FailoverOptions, ports *portRanges, res *FailoverResults) (err error) {
	if !slices.Contains(FleetFailoverModes, config.Mode(mode)) {
		for _, name := range events {
			res.Cells = append(res.Cells, FailoverCell{Event: name, Datapath: dp, Mode: mode, Unsupported: natBehindECMP})
		}
		return nil
	}
	e.Progress.Step("fleet %s %s: starting two nodes behind the router", dp, mode)
	f, err := e.startFleetPair(ctx, dp, mode)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, f.stop(context.WithoutCancel(ctx))) }()
	for _, name := range events {
		e.Progress.Step("fleet %s %s: %s under %d long-lived connections and %d new a second", dp, mode, name, o.Conns, o.NewRate)
		c, err := f.runCell(ctx, name, o, ports)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		res.Cells = append(res.Cells, c)
		e.Progress.Step("fleet %s %s: %s: %s broken; restoring the fleet", dp, mode, name, c.label())
		if err := f.restore(ctx); err != nil {
			return fmt.Errorf("%s: restoring the fleet: %w", name, err)
		}
	}
	return nil
}
