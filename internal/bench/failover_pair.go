package bench

// The keepalived pair bench failover runs its events in: fleet nodes 1 and 2, one config each
// (the web service in one mode, a sync section over the backends' side), keepalived holding the
// front address the router routes the VIPs to and the backends'-side one (docs/ha.md).

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicelb/sluice/internal/lab"
)

// The pair's VRRP addresses: the front one the router routes the VIPs to, the backends'-side
// one the nat backends route the client through and fullnat translates to.
var (
	frontVRRP = lab.VRRPInstance{Name: "front", Iface: "eth0", VRID: 91, Addr: netip.MustParseAddr("10.91.3.254")}
	backVRRP  = lab.VRRPInstance{Name: "back", Iface: "eth1", VRID: 92, Addr: netip.MustParseAddr("10.91.2.254")}
)

// The pair's bounds: how long a node may take to be ready, the addresses to move, the pair to
// settle back to node 1 as master; and how often they are polled.
const (
	readyLimit   = time.Minute
	moveLimit    = 30 * time.Second
	restoreLimit = time.Minute
	pairPoll     = 10 * time.Millisecond
)

// syncSecret is the secret the pair's nodes share (a benchmark's lab, not a production one).
const syncSecret = "the secret of sluice-lab bench failover's pair\n"

// pair is Sluice and keepalived on fleet nodes 1 and 2.
type pair struct {
	e        *Env
	datapath string
	mode     string
	dir      string
	configs  [2]string
	sockets  [2]string
	// bins are the binaries the nodes' daemons run (binary-upgrade changes node 1's).
	bins       [2]string
	daemons    [2]*serveProcess
	keepalived [2]bool
	// natRoutes are set while the backends route the client via the backends'-side address.
	natRoutes bool
}

// pairConfig is node i's config: the web service in mode over every backend, health-checked,
// fullnat translated to the backends'-side VRRP address, the flows replicated to the other node
// over the backends' side; no state file, so nothing outlives the run.
func pairConfig(l *lab.Lab, datapath, mode string, i int, secretFile string) string {
	return nodeConfig(l, datapath, mode, i, secretFile, backVRRP.Addr, "")
}

// nodeConfig is pairConfig with fullnat translated to source, and sections (YAML lines) before
// the services.
func nodeConfig(l *lab.Lab, datapath, mode string, i int, secretFile string, source netip.Addr, sections string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "datapath: %s\nstate: {persist: \"off\"}\nsync:\n  interface: eth1\n  address: %s\n  peers: [%s]\n  secret_file: %s\n",
		datapath, l.BalancerBackSideAddr(i, false), l.BalancerBackSideAddr(3-i, false), secretFile)
	b.WriteString(sections)
	fmt.Fprintf(&b, "services:\n  - name: web\n    vip: %s\n    port: %d\n    protocol: tcp\n    mode: %s\n", lab.VIP4, vipPort, mode)
	if mode == "fullnat" {
		fmt.Fprintf(&b, "    fullnat_source: %s\n", source)
	}
	fmt.Fprintf(&b, "    health_check: %s\n    backends:\n", fleetHealthCheck)
	for _, t := range backendTargets(&Env{Lab: l}) {
		fmt.Fprintf(&b, "      - address: %s\n", t.Addr())
	}
	return b.String()
}

// startPair writes both nodes' configs, clears the nodes, routes the VIPs via the front address
// (and, for nat, the backends' replies via the back one), starts both daemons and, once each is
// ready, its keepalived; it returns once node 1 holds the addresses.
func (e *Env) startPair(ctx context.Context, dp, mode string) (p *pair, err error) {
	p = &pair{e: e, datapath: dp, mode: mode, dir: filepath.Join(e.Dir(), dp+"-"+mode), bins: [2]string{e.Sluice, e.Sluice}}
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		return nil, err
	}
	secret := filepath.Join(p.dir, "sync.key")
	if err := os.WriteFile(secret, []byte(syncSecret), 0o600); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, p.stop(context.WithoutCancel(ctx)))
		}
	}()
	if err := e.Lab.RouteVIPsVia(frontVRRP.Addr, netip.Addr{}); err != nil {
		return p, err
	}
	if err := p.routeClientVia(ctx, mode == "nat"); err != nil {
		return p, err
	}
	for i := 1; i <= 2; i++ {
		p.configs[i-1] = filepath.Join(p.dir, fmt.Sprintf("node%d.yaml", i))
		p.sockets[i-1] = filepath.Join(p.dir, fmt.Sprintf("node%d.sock", i))
		if err := os.WriteFile(p.configs[i-1], []byte(pairConfig(e.Lab, dp, mode, i, secret)), 0o644); err != nil {
			return p, err
		}
		if err := e.resetNode(ctx, e.Lab.BalancerNSOf(i)); err != nil {
			return p, err
		}
		if err := p.startDaemon(i); err != nil {
			return p, err
		}
	}
	for i := 1; i <= 2; i++ {
		if err := p.waitReady(ctx, i, readyLimit); err != nil {
			return p, err
		}
		if err := p.startKeepalived(ctx, i); err != nil {
			return p, err
		}
	}
	err = p.waitHolders(ctx, restoreLimit, 1)
	return p, err
}

// routeClientVia adds (on) or removes every backend's route to the client via the backends'-side
// VRRP address, which nat needs for the replies to reach the master.
func (p *pair) routeClientVia(ctx context.Context, on bool) error {
	if on == p.natRoutes {
		return nil
	}
	verb, client := "del", p.e.Lab.ClientAddr(false).String()+"/32"
	if on {
		verb = "add"
	}
	var errs []error
	for j := 1; j <= p.e.Lab.Backends; j++ {
		args := []string{"ip", "route", verb, client}
		if on {
			args = append(args, "via", backVRRP.Addr.String())
		}
		errs = append(errs, p.e.InNS(ctx, p.e.Lab.BackendNS(j), args...))
	}
	p.natRoutes = on
	return errors.Join(errs...)
}

// stop ends both keepalived and both daemons, removes the routes it added and clears the nodes.
func (p *pair) stop(ctx context.Context) error {
	var errs []error
	for i := 1; i <= 2; i++ {
		if p.keepalived[i-1] {
			errs = append(errs, p.e.Lab.StopKeepalived(i))
			p.keepalived[i-1] = false
		}
	}
	var wg sync.WaitGroup
	for _, d := range p.daemons {
		if d != nil {
			wg.Go(d.stop)
		}
	}
	wg.Wait()
	errs = append(errs, p.e.Lab.RestoreBalancer(1), p.routeClientVia(ctx, false))
	for i := 1; i <= 2; i++ {
		errs = append(errs, p.e.resetNode(ctx, p.e.Lab.BalancerNSOf(i)))
	}
	errs = append(errs, p.e.InNS(ctx, p.e.Lab.RouterNS(), "ip", "route", "del", lab.VIPNet4))
	return errors.Join(errs...)
}

// startDaemon starts node i's daemon from its binary.
func (p *pair) startDaemon(i int) error {
	env := *p.e
	env.Sluice = p.bins[i-1]
	d, err := env.startServe(p.e.Lab.BalancerNSOf(i), p.configs[i-1], p.sockets[i-1], filepath.Join(p.dir, fmt.Sprintf("node%d.log", i)))
	if err != nil {
		return fmt.Errorf("node %d: %w", i, err)
	}
	p.daemons[i-1] = d
	return nil
}

// running tells whether node i's daemon runs.
func (p *pair) running(i int) bool {
	d := p.daemons[i-1]
	if d == nil {
		return false
	}
	select {
	case <-d.exited:
		return false
	default:
		return true
	}
}

// kill ends node i's daemon with SIGKILL, as a crash: it leaves its datapath, and takes the
// conntrackd it runs with it.
func (p *pair) kill(i int) {
	d := p.daemons[i-1]
	_ = d.cmd.Process.Kill()
	<-d.exited
}

// startKeepalived starts node i's keepalived with the pair's config.
func (p *pair) startKeepalived(ctx context.Context, i int) error {
	conf := lab.PairKeepalivedConfig(p.e.Sluice, p.sockets[i-1], i, frontVRRP, backVRRP)
	if err := p.e.Lab.StartKeepalived(ctx, i, conf); err != nil {
		return err
	}
	p.keepalived[i-1] = true
	return nil
}

// stopKeepalived stops node i's keepalived in an orderly way (it gives the addresses up at once).
func (p *pair) stopKeepalived(i int) error {
	p.keepalived[i-1] = false
	return p.e.Lab.StopKeepalived(i)
}

// cli runs `sluice ARGS` against node i's daemon.
func (p *pair) cli(ctx context.Context, i int, args ...string) error {
	return run(exec.CommandContext(ctx, p.e.Sluice, append([]string{"--socket", p.sockets[i-1]}, args...)...))
}

// ready tells whether node i's daemon says the node should take traffic (keepalived's track script).
func (p *pair) ready(ctx context.Context, i int) bool { return p.cli(ctx, i, "node", "check") == nil }

// waitReady waits until node i is ready, up to limit; it fails at once if its daemon exits.
func (p *pair) waitReady(ctx context.Context, i int, limit time.Duration) error {
	_, err := p.poll(ctx, limit, fmt.Sprintf("node %d ready", i), func() (bool, error) {
		if !p.running(i) {
			return false, fmt.Errorf("sluice serve on node %d exited%s", i, p.lastLogs(i))
		}
		return p.ready(ctx, i), nil
	})
	return err
}

// waitAnswers waits until node i's daemon answers its API (it may not be ready yet), up to readyLimit.
func (p *pair) waitAnswers(ctx context.Context, i int) error {
	_, err := p.poll(ctx, readyLimit, fmt.Sprintf("answer from node %d's daemon", i), func() (bool, error) {
		if !p.running(i) {
			return false, fmt.Errorf("sluice serve on node %d exited%s", i, p.lastLogs(i))
		}
		return p.cli(ctx, i, "node", "status") == nil, nil
	})
	return err
}

// holders lists the nodes holding the front VRRP address.
func (p *pair) holders() ([]int, error) { return p.e.Lab.VRRPHolders(frontVRRP.Iface, frontVRRP.Addr) }

// waitHolders waits until exactly the nodes want hold the front address (none: nobody), up to limit.
func (p *pair) waitHolders(ctx context.Context, limit time.Duration, want ...int) error {
	_, err := p.poll(ctx, limit, fmt.Sprintf("the front address held by node(s) %v", want), func() (bool, error) {
		h, err := p.holders()
		return slices.Equal(h, want), err
	})
	return err
}

// waitHeldBy waits until node i holds the front address (the other one may still hold it too:
// a node cut off the network keeps it until its track script fails), and returns how long that took.
func (p *pair) waitHeldBy(ctx context.Context, i int) (time.Duration, error) {
	return p.poll(ctx, moveLimit, fmt.Sprintf("node %d holding the front address", i), func() (bool, error) {
		h, err := p.holders()
		return slices.Contains(h, i), err
	})
}

// poll calls done every pairPoll until it says so, and returns how long that took; it fails
// after limit (naming what it waited for) or on done's error.
func (p *pair) poll(ctx context.Context, limit time.Duration, what string, done func() (bool, error)) (time.Duration, error) {
	start := time.Now()
	for {
		ok, err := done()
		if err != nil {
			return 0, err
		}
		if ok {
			return time.Since(start), nil
		}
		if time.Since(start) > limit {
			return 0, fmt.Errorf("no %s after %s", what, limit)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(pairPoll):
		}
	}
}

// lastLogs quotes the last lines node i's daemon logged, for an error: the lab's teardown removes the logs.
func (p *pair) lastLogs(i int) string {
	data, _ := os.ReadFile(filepath.Join(p.dir, fmt.Sprintf("node%d.log", i)))
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return fmt.Sprintf("; its last log lines:\n  %s", strings.Join(lines[max(len(lines)-4, 0):], "\n  "))
}

// restore brings the pair back to where every cell starts: both nodes on the network, both
// daemons running and undrained with every backend's weight 1, both keepalived running, node 1
// holding the addresses and node 2 ready to take them.
func (p *pair) restore(ctx context.Context) error {
	if err := p.e.Lab.RestoreBalancer(1); err != nil {
		return err
	}
	for i := 1; i <= 2; i++ {
		if !p.running(i) {
			if err := p.startDaemon(i); err != nil {
				return err
			}
		}
		if err := p.waitAnswers(ctx, i); err != nil {
			return err
		}
		if err := p.setWeights(ctx, i, 1, p.changedBackends()); err != nil {
			return err
		}
		if err := p.cli(ctx, i, "node", "undrain"); err != nil {
			return err
		}
		if err := p.waitReady(ctx, i, readyLimit); err != nil {
			return err
		}
		if !p.keepalived[i-1] {
			if err := p.startKeepalived(ctx, i); err != nil {
				return err
			}
		}
	}
	return p.waitHolders(ctx, restoreLimit, 1)
}

// changedBackends are the backends backends-change sets to weight 0: 30% of them, at least one.
func (p *pair) changedBackends() []netip.Addr {
	targets := backendTargets(p.e)
	n := max(1, (3*len(targets)+9)/10)
	var out []netip.Addr
	for _, t := range targets[len(targets)-n:] {
		out = append(out, t.Addr())
	}
	return out
}

// setWeights gives backends weight w on node i, through its daemon.
func (p *pair) setWeights(ctx context.Context, i, w int, backends []netip.Addr) error {
	for _, b := range backends {
		if err := p.cli(ctx, i, "backend", "weight", "web", b.String(), fmt.Sprint(w)); err != nil {
			return fmt.Errorf("node %d: %w", i, err)
		}
	}
	return nil
}
