package bench

// The events of bench failover's rows, and the cell that runs one under load.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/sluicelb/sluice/internal/lab"
)

// FailoverEvents are the events bench failover runs, in the table's order.
var FailoverEvents = []string{"node-death", "vrrp-takeover", "vrrp-failback", "drain", "daemon-restart", "binary-upgrade", "backends-change"}

// A cell's phases: the load runs warmup before the event (the flows reach the other node
// meanwhile) and settleTime after the pair reconverged, longer than stallLimit so that a
// connection the event stalled is counted. drainHold is how long a drained node stays drained;
// backendsCut is when backends-change loses the master, within backendsSpread of weight changes.
const (
	warmup         = 2 * time.Second
	settleTime     = 6 * time.Second
	drainHold      = 2 * time.Second
	backendsSpread = time.Second
	backendsCut    = 500 * time.Millisecond
)

// pairEvent is one row: prepare (optional) runs before the load and is not counted; act runs the
// event under load and returns the reconvergence, and for a drain the time back.
type pairEvent struct {
	prepare func(ctx context.Context, p *pair) error
	act     func(ctx context.Context, p *pair) (reconverge, back time.Duration, err error)
}

// failoverEvent is the event named name (one of FailoverEvents).
func failoverEvent(name string) pairEvent {
	return map[string]pairEvent{
		"node-death":      {act: nodeDeath},
		"vrrp-takeover":   {act: vrrpTakeover},
		"vrrp-failback":   {prepare: masterDown, act: vrrpFailback},
		"drain":           {act: drainUndrain},
		"daemon-restart":  {act: daemonRestart},
		"binary-upgrade":  {act: binaryUpgrade},
		"backends-change": {act: backendsChange},
	}[name]
}

// during runs action in the background and wait meanwhile, and returns how long wait took from
// action's start, once both ended.
func during(action, wait func() error) (time.Duration, error) {
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- action() }()
	err := wait()
	took := time.Since(start)
	return took, errors.Join(err, <-done)
}

// killNode is a node's death: node i's links cut (no goodbye) and its daemon killed with
// SIGKILL; in the pair its keepalived, alone, gives its addresses up when its track script fails.
func (p *pair) killNode(i int) error {
	err := p.e.Lab.CutBalancer(i)
	p.kill(i)
	return err
}

// killMaster is the pair's master's death: killNode(1).
func (p *pair) killMaster() error { return p.killNode(1) }

// heldBy2 waits until node 2 holds the front address.
func (p *pair) heldBy2(ctx context.Context) func() error {
	return func() error {
		_, err := p.waitHeldBy(ctx, 2)
		return err
	}
}

// nodeDeath: node 1 dies; reconverged when node 2 holds the address.
func nodeDeath(ctx context.Context, p *pair) (time.Duration, time.Duration, error) {
	took, err := during(p.killMaster, p.heldBy2(ctx))
	return took, 0, err
}

// vrrpTakeover: node 1's keepalived stops (priority 0 advert); reconverged when node 2 holds the address.
func vrrpTakeover(ctx context.Context, p *pair) (time.Duration, time.Duration, error) {
	took, err := during(func() error { return p.stopKeepalived(1) }, p.heldBy2(ctx))
	return took, 0, err
}

// masterDown prepares the fail-back: node 1 dies and node 2 alone holds the addresses.
func masterDown(ctx context.Context, p *pair) error {
	if err := p.killMaster(); err != nil {
		return err
	}
	return p.waitHolders(ctx, moveLimit, 2)
}

// vrrpFailback: node 1 comes back on the network and its daemon starts; it preempts once its
// daemon is ready (the initial sync from node 2 in); reconverged when node 1 alone holds the address.
func vrrpFailback(ctx context.Context, p *pair) (time.Duration, time.Duration, error) {
	start := time.Now()
	if err := errors.Join(p.e.Lab.RestoreBalancer(1), p.startDaemon(1)); err != nil {
		return 0, 0, err
	}
	err := p.waitHolders(ctx, moveLimit, 1)
	return time.Since(start), 0, err
}

// drainUndrain: node 1 is drained (its track script fails, node 2 takes over), stays drained
// drainHold, and is undrained (it preempts); the times to node 2 holding the address and back.
func drainUndrain(ctx context.Context, p *pair) (time.Duration, time.Duration, error) {
	took, err := during(func() error { return p.cli(ctx, 1, "node", "drain", "--no-wait") }, p.heldBy2(ctx))
	if err != nil {
		return 0, 0, err
	}
	if err := sleep(ctx, drainHold); err != nil {
		return 0, 0, err
	}
	start := time.Now()
	if err := p.cli(ctx, 1, "node", "undrain"); err != nil {
		return 0, 0, err
	}
	err = p.waitHolders(ctx, moveLimit, 1)
	return took, time.Since(start), err
}

// daemonRestart: node 1's daemon is stopped (SIGTERM) and started again; reconverged when it is
// ready and node 1 alone holds the address.
func daemonRestart(ctx context.Context, p *pair) (time.Duration, time.Duration, error) {
	start := time.Now()
	p.daemons[0].stop()
	if err := p.startDaemon(1); err != nil {
		return 0, 0, err
	}
	err := errors.Join(p.waitReady(ctx, 1, readyLimit), p.waitHolders(ctx, moveLimit, 1))
	return time.Since(start), 0, err
}

// binaryUpgrade is daemonRestart from a copy of the binary at a new path, as a package upgrade
// replaces it; node 1 runs the copy from then on.
func binaryUpgrade(ctx context.Context, p *pair) (time.Duration, time.Duration, error) {
	next := filepath.Join(p.dir, fmt.Sprintf("sluice-upgraded-%d", time.Now().UnixNano()))
	if err := copyExecutable(p.bins[0], next); err != nil {
		return 0, 0, err
	}
	p.bins[0] = next
	return daemonRestart(ctx, p)
}

// copyExecutable copies the file from to a new executable file to.
func copyExecutable(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	_, err = io.Copy(dst, src)
	return errors.Join(err, dst.Close())
}

// backendsChange: 30% of the backends change while node 1 dies; reconverged (from the death)
// when node 2 holds the address.
func backendsChange(ctx context.Context, p *pair) (time.Duration, time.Duration, error) {
	return p.changeBackendsWhileDying(ctx, 1, p.heldBy2(ctx))
}

// changeBackendsWhileDying gives 30% of the backends weight 0 on both nodes, spread over
// backendsSpread, while node dies (killNode) backendsCut into it, and returns the time from the
// death until reconverged returned; a dead node's weights are left alone.
func (p *pair) changeBackendsWhileDying(ctx context.Context, node int, reconverged func() error) (time.Duration, time.Duration, error) {
	changed := p.changedBackends()
	var mu sync.Mutex
	dead := false
	type step struct {
		at    time.Duration
		do    func() error
		death bool
	}
	steps := []step{{at: backendsCut, death: true, do: func() error {
		mu.Lock()
		defer mu.Unlock()
		dead = true
		return p.killNode(node)
	}}}
	for k, b := range changed {
		steps = append(steps, step{at: time.Duration(k) * backendsSpread / time.Duration(len(changed)), do: func() error {
			mu.Lock()
			defer mu.Unlock()
			nodes := []int{3 - node}
			if !dead {
				nodes = append(nodes, node)
			}
			for _, i := range nodes {
				if err := p.setWeights(ctx, i, 0, []netip.Addr{b}); err != nil {
					return err
				}
			}
			return nil
		}})
	}
	slices.SortStableFunc(steps, func(a, b step) int { return int(a.at - b.at) })
	start := time.Now()
	cut := make(chan time.Time, 1)
	done := make(chan error, 1)
	go func() {
		var errs []error
		for _, s := range steps {
			time.Sleep(time.Until(start.Add(s.at)))
			errs = append(errs, s.do())
			if s.death {
				cut <- time.Now()
			}
		}
		done <- errors.Join(errs...)
	}()
	at := <-cut
	err := reconverged()
	took := time.Since(at)
	return took, 0, errors.Join(err, <-done)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// runCell runs ev in the pair under load (measure).
func (p *pair) runCell(ctx context.Context, name string, o FailoverOptions, ports *portRanges) (FailoverCell, error) {
	ev := failoverEvent(name)
	if ev.prepare != nil {
		if err := ev.prepare(ctx, p); err != nil {
			return FailoverCell{}, fmt.Errorf("preparing: %w", err)
		}
	}
	act := func() (time.Duration, time.Duration, error) { return ev.act(ctx, p) }
	c, moves, err := measure(ctx, p.e.Lab, o, ports, cellRun{act: act, watch: p.watchMoves})
	if err != nil {
		return FailoverCell{}, err
	}
	c.Event, c.Datapath, c.Mode, c.AddressMoves = name, p.datapath, p.mode, moves
	return c, nil
}

// cellRun is what measure runs under load: act runs the event and returns the reconvergence (and
// for a drain the time back); watch starts a counter of moves and returns the function that
// stops it and returns the count; opened, if set, is told the client's ends of the long-lived
// connections once they are open, before the warmup.
type cellRun struct {
	act    func() (reconverge, back time.Duration, err error)
	watch  func() func() int
	opened func(local []netip.AddrPort)
}

// measure runs r under load (the load from the next client port range, to the VIP): the load
// starts warmup before the event and runs until settleTime after act returned. It returns the
// cell's counts and times, and the count of r's watch.
func measure(ctx context.Context, l *lab.Lab, o FailoverOptions, ports *portRanges, r cellRun) (FailoverCell, int, error) {
	if err := l.SetClientPorts(ports.next(true)); err != nil {
		return FailoverCell{}, 0, err
	}
	to := netip.AddrPortFrom(netip.MustParseAddr(lab.VIP4), vipPort)
	if err := waitAnswered(ctx, l, to, moveLimit); err != nil {
		return FailoverCell{}, 0, err
	}
	count := r.watch()
	load := startLoad(l, to, o.Conns, o.NewRate)
	if r.opened != nil {
		r.opened(slices.Clone(load.local))
	}
	event := time.Now().Add(warmup)
	reconverge, back, err := func() (time.Duration, time.Duration, error) {
		if err := sleep(ctx, time.Until(event)); err != nil {
			return 0, 0, err
		}
		reconverge, back, err := r.act()
		if err != nil {
			return 0, 0, err
		}
		return reconverge, back, sleep(ctx, settleTime)
	}()
	c := load.finish(event)
	n := count()
	if err != nil {
		return FailoverCell{}, 0, err
	}
	c.ReconvergeS, c.ReturnS = reconverge.Seconds(), back.Seconds()
	return c, n, nil
}

// watchMoves counts the times a node takes the front address (appears among its holders).
func (p *pair) watchMoves() func() int {
	return watchChanges(p.holders, func(last, now []int) int {
		n := 0
		for _, i := range now {
			if !slices.Contains(last, i) {
				n++
			}
		}
		return n
	})
}

// watchChanges samples every pairPoll until the function it returns is called, which returns the
// sum of changed over every two consecutive samples (a failed sample is skipped).
func watchChanges[T any](sample func() (T, error), changed func(last, now T) int) func() int {
	stop, count := make(chan struct{}), make(chan int, 1)
	go func() {
		last, _ := sample()
		n := 0
		for {
			select {
			case <-stop:
				count <- n
				return
			case <-time.After(pairPoll):
			}
			now, err := sample()
			if err != nil {
				continue
			}
			n += changed(last, now)
			last = now
		}
	}()
	return func() int {
		close(stop)
		return <-count
	}
}
