package bench

// `sluice-lab bench fleet`: requests/s through 1..N Sluice nodes that a BIRD router spreads by ECMP,
// against the same router sending the client straight to the backends, and what a node's death
// costs while new connections keep coming.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/sluicelb/sluice/internal/lab"
)

// FleetOptions configure `sluice-lab bench fleet`.
type FleetOptions struct {
	// Nodes is the number of balancer nodes (2..lab.MaxBalancers); every count from 1 to Nodes is measured.
	Nodes     int      `json:"nodes"`
	Datapaths []string `json:"datapaths"`
	// Duration is the length of each wrk run; Rounds how many times every node count gets every workload.
	Duration time.Duration `json:"duration_ns"`
	Rounds   int           `json:"rounds"`
	// Workloads select among FleetWorkloads by name; empty means all of them.
	Workloads []string `json:"workloads,omitempty"`
	// Failover is the length of the failover run; a node is cut a third of the way in.
	Failover time.Duration `json:"failover_ns"`
	// KeepLab leaves the lab up afterwards.
	KeepLab bool `json:"keep_lab"`
}

// FleetWorkloads are the names of the bench lb workloads bench fleet runs.
var FleetWorkloads = []string{"keepalive", "per-conn"}

// The failover run's bounds: the shortest run (the router needs up to the hold time after the
// cut, a third of the way in), and how long the router may take to drop the cut node.
const (
	minFailover      = 9 * time.Second
	reconvergeLimit  = 30 * time.Second
	fleetHoldTime    = 3 * time.Second
	announceLimit    = time.Minute
	nextHopsPoll     = 10 * time.Millisecond
	failoverWorkers  = 16
	failoverTimeout  = 2 * time.Second // a request not answered by then failed, as wrk's --timeout
	fleetHealthCheck = "{type: tcp, interval: 1s, timeout: 500ms}"
)

// Check reports the first option out of range, naming its flag.
func (o FleetOptions) Check() error {
	if o.Nodes < 2 || o.Nodes > lab.MaxBalancers {
		return fmt.Errorf("--nodes: %d is not 2..%d", o.Nodes, lab.MaxBalancers)
	}
	if o.Failover < minFailover {
		return fmt.Errorf("--failover: %s is less than %s (the router needs up to the %s hold time after the cut)", o.Failover, minFailover, fleetHoldTime)
	}
	if err := firstError(
		checkDuration("duration", o.Duration, time.Second),
		checkCount("rounds", o.Rounds, 1),
		checkDatapaths("datapath", o.Datapaths),
	); err != nil {
		return err
	}
	_, err := o.workloads()
	return err
}

// workloads are the selected workloads, in bench lb's order.
func (o FleetOptions) workloads() ([]Workload, error) {
	names := o.Workloads
	if len(names) == 0 {
		names = FleetWorkloads
	}
	for _, n := range names {
		if !slices.Contains(FleetWorkloads, n) {
			return nil, fmt.Errorf("--workloads: bench fleet runs %s, not %q", strings.Join(FleetWorkloads, " and "), n)
		}
	}
	return selectWorkloads(names)
}

// FleetResults are what `sluice-lab bench fleet` measured, and how.
type FleetResults struct {
	Options   FleetOptions `json:"options"`
	Backends  int          `json:"backends"`
	Cores     int          `json:"cores"`
	Workloads []Workload   `json:"workloads"`
	// Note says what the figures can and cannot show on this machine.
	Note     string          `json:"note"`
	Cells    []FleetCell     `json:"cells"`
	Failover []FleetFailover `json:"failover"`
}

// FleetCell is one way through the router under one workload, in one datapath's rounds: medians
// over the rounds (errors summed), and the rounds.
type FleetCell struct {
	Datapath string `json:"datapath"`
	Workload string `json:"workload"`
	// Nodes is how many nodes the router spread the VIP over; 0 is the direct baseline (the router
	// spreads lab.Anycast4 over the backends itself, no balancer).
	Nodes int `json:"nodes"`
	LBSample
	// RatioOne is RPS over the one-node cell's; RatioDirect over the direct baseline's.
	RatioOne    float64    `json:"ratio_to_one_node"`
	RatioDirect float64    `json:"ratio_to_direct"`
	Rounds      []LBSample `json:"rounds"`
}

// FleetFailover is one datapath's node failure under one-request-per-connection load.
type FleetFailover struct {
	Datapath string `json:"datapath"`
	Nodes    int    `json:"nodes"`
	// CutNode is the node cut off the network CutAtS seconds into a run of DurationS.
	CutNode   int     `json:"cut_node"`
	DurationS float64 `json:"duration_s"`
	CutAtS    float64 `json:"cut_at_s"`
	// ReconvergenceS is the time from the cut until the router no longer routes the VIP via the node.
	ReconvergenceS float64 `json:"reconvergence_s"`
	// RPSBefore is answered requests/s before the cut; RPSAfter after the reconvergence (0 if the
	// run ended before it).
	RPSBefore float64 `json:"requests_per_second_before"`
	RPSAfter  float64 `json:"requests_per_second_after"`
	Requests  int     `json:"requests"`
	// Failed requests got no answer within TimeoutS; FailedAfter of them started after the reconvergence.
	Failed      int     `json:"failed"`
	FailedAfter int     `json:"failed_after_reconvergence"`
	TimeoutS    float64 `json:"request_timeout_s"`
	Workers     int     `json:"workers"`
}

// Cell returns the cell of datapath and workload through nodes (0: direct), if measured.
func (r *FleetResults) Cell(datapath, workload string, nodes int) (FleetCell, bool) {
	for _, c := range r.Cells {
		if c.Datapath == datapath && c.Workload == workload && c.Nodes == nodes {
			return c, true
		}
	}
	return FleetCell{}, false
}

// fleetNote is what the figures show on a machine of cores cores.
func fleetNote(cores int) string {
	return fmt.Sprintf("This machine has %d CPU cores, shared by every namespace (client, router, nodes, backends): "+
		"more nodes add no CPU here. The figures show that ECMP spreads the flows over the nodes and what the "+
		"balancer hop costs, not capacity scaling.", cores)
}

// RunFleet brings up a fleet lab of o.Nodes nodes and, for each datapath, runs Sluice on every
// node, measures every workload through 1..Nodes active nodes and the direct baseline
// (interleaved, in balanced orders), then cuts a node under load. o must pass Check.
func RunFleet(ctx context.Context, e *Env, o FleetOptions) (res *FleetResults, err error) {
	if err := wrkPath(); err != nil {
		return nil, fmt.Errorf("wrk not found (Debian package wrk): %w", err)
	}
	workloads, err := o.workloads()
	if err != nil {
		return nil, err
	}
	e.Lab.Balancers = o.Nodes
	e.Progress.Step("fleet lab %s: %d nodes behind a BIRD router", e.Lab.Prefix, o.Nodes)
	res = &FleetResults{Options: o, Backends: e.Lab.Backends, Cores: runtime.NumCPU(), Workloads: workloads, Note: fleetNote(runtime.NumCPU())}
	err = e.InLab(ctx, o.KeepLab, func() error {
		ports := &portRanges{}
		for _, dp := range o.Datapaths {
			if err := e.benchFleet(ctx, dp, workloads, o, ports, res); err != nil {
				return fmt.Errorf("%s: %w", dp, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// benchFleet measures one datapath: the interleaved rounds, then the failover.
func (e *Env) benchFleet(ctx context.Context, dp string, workloads []Workload, o FleetOptions, ports *portRanges, res *FleetResults) (err error) {
	f, err := e.startFleet(ctx, dp, o.Nodes)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, f.stop(context.WithoutCancel(ctx))) }()
	samples := map[fleetKey][]LBSample{}
	err = interleave(o.Rounds, o.Nodes+1, func(round, nodes int) error {
		label := fmt.Sprintf("%s %s", dp, roundLabel(round, o.Rounds))
		if nodes > 0 {
			e.Progress.Step("%s: routing the VIP over %d node(s)", label, nodes)
			if err := f.activate(ctx, nodes); err != nil {
				return err
			}
		}
		for _, w := range workloads {
			e.Progress.Step("%s: %s, %s (%s)", label, through(nodes), w.Name, o.Duration)
			s, err := e.runWorkload(ctx, w, fleetTargets(e, nodes), LBOptions{Duration: o.Duration}, ports)
			if err != nil {
				return fmt.Errorf("%s, %s: %w", through(nodes), w.Name, err)
			}
			k := fleetKey{w.Name, nodes}
			samples[k] = append(samples[k], s)
		}
		return nil
	})
	if err != nil {
		return err
	}
	res.Cells = append(res.Cells, fleetCells(dp, o.Nodes, workloads, samples)...)
	if err := f.activate(ctx, o.Nodes); err != nil {
		return err
	}
	fo, err := f.failover(ctx, o.Failover, ports)
	if err != nil {
		return fmt.Errorf("failover: %w", err)
	}
	res.Failover = append(res.Failover, fo)
	return nil
}

// fleetKey names a cell within one datapath.
type fleetKey struct {
	workload string
	nodes    int
}

// through names a way through the router: direct, 1 node, 2 nodes.
func through(nodes int) string {
	switch nodes {
	case 0:
		return "direct"
	case 1:
		return "1 node"
	}
	return fmt.Sprintf("%d nodes", nodes)
}

// fleetTargets sends every wrk thread to the VIP, or to lab.Anycast4 for the direct baseline.
func fleetTargets(e *Env, nodes int) []netip.AddrPort {
	if nodes == 0 {
		return ecmp{}.targets(e)
	}
	return vipTargets(e)
}

// fleetCells turns one datapath's samples into cells, per workload the direct baseline then
// 1..nodes, with medians and ratios to one node and to direct.
func fleetCells(dp string, nodes int, workloads []Workload, samples map[fleetKey][]LBSample) []FleetCell {
	var out []FleetCell
	for _, w := range workloads {
		first := len(out)
		for n := range nodes + 1 {
			ss := samples[fleetKey{w.Name, n}]
			out = append(out, FleetCell{Datapath: dp, Workload: w.Name, Nodes: n, LBSample: medians(ss), Rounds: ss})
		}
		cells := out[first:]
		for i := range cells {
			cells[i].RatioDirect = ratio(cells[i].RPS, cells[0].RPS)
			cells[i].RatioOne = ratio(cells[i].RPS, cells[1].RPS)
		}
	}
	return out
}

// fleetVIP is the prefix the nodes announce for the benchmark's service.
var fleetVIP = netip.PrefixFrom(netip.MustParseAddr(lab.VIP4), 32)

// fleetConfig is the one config every node runs: BGP to the router, and one DSR web service on
// the VIP over every backend, health-checked; no state file, so nothing outlives the run.
func fleetConfig(l *lab.Lab, datapath string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `datapath: %s
state: {persist: "off"}
bgp:
  asn: %d
  shutdown_grace: 1s
  peers:
    - {address: %s, asn: %d, hold_time: %s}
services:
  - name: web
    vip: %s
    port: %d
    protocol: tcp
    mode: dsr
    health_check: %s
    backends:
`, datapath, lab.BalancerASN, l.RouterFrontAddr(false), lab.RouterASN, fleetHoldTime, lab.VIP4, vipPort, fleetHealthCheck)
	for _, t := range backendTargets(&Env{Lab: l}) {
		fmt.Fprintf(&b, "      - address: %s\n", t.Addr())
	}
	return b.String()
}

// fleet is Sluice running on every node of the lab, one daemon each, on one config.
type fleet struct {
	e        *Env
	datapath string
	daemons  []*serveProcess
	sockets  []string
}

// startFleet clears every node, starts a daemon on each and waits until the router routes the
// VIP over all of them.
func (e *Env) startFleet(ctx context.Context, dp string, nodes int) (*fleet, error) {
	dir := filepath.Join(e.Dir(), dp)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	file := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(file, []byte(fleetConfig(e.Lab, dp)), 0o644); err != nil {
		return nil, err
	}
	e.Progress.Step("%s: starting sluice serve on %d nodes", dp, nodes)
	f := &fleet{e: e, datapath: dp}
	for i := 1; i <= nodes; i++ {
		ns := e.Lab.BalancerNSOf(i)
		err := e.resetNode(ctx, ns)
		var d *serveProcess
		if err == nil {
			socket := filepath.Join(dir, fmt.Sprintf("node%d.sock", i))
			d, err = e.startServe(ns, file, socket, filepath.Join(dir, fmt.Sprintf("node%d.log", i)))
			f.daemons, f.sockets = append(f.daemons, d), append(f.sockets, socket)
		}
		if err != nil {
			return nil, errors.Join(fmt.Errorf("node %d: %w", i, err), f.stop(context.WithoutCancel(ctx)))
		}
	}
	if err := f.waitActive(ctx, nodes, announceLimit); err != nil {
		return nil, errors.Join(err, f.stop(context.WithoutCancel(ctx)))
	}
	return f, nil
}

// stop ends every daemon (each withdraws, waits its shutdown grace and exits) and clears the nodes.
func (f *fleet) stop(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, d := range f.daemons {
		wg.Go(d.stop)
	}
	wg.Wait()
	var errs []error
	for i := range f.daemons {
		errs = append(errs, f.e.resetNode(ctx, f.e.Lab.BalancerNSOf(i+1)))
	}
	f.daemons = nil
	return errors.Join(errs...)
}

// activate leaves nodes 1..n announcing the VIP and drains the others (sluice node drain
// --no-wait; undrain brings a node back), then waits until the router routes over exactly 1..n.
func (f *fleet) activate(ctx context.Context, n int) error {
	for i, socket := range f.sockets {
		args := []string{"--socket", socket, "node", "undrain"}
		if i >= n {
			args = []string{"--socket", socket, "node", "drain", "--no-wait"}
		}
		if err := run(f.e.Lab.Exec(ctx, f.e.Lab.BalancerNSOf(i+1), append([]string{f.e.Sluice}, args...)...)); err != nil {
			return fmt.Errorf("node %d: %w", i+1, err)
		}
	}
	return f.waitActive(ctx, n, reconvergeLimit)
}

// waitActive waits until the router routes the VIP over exactly nodes 1..n.
func (f *fleet) waitActive(ctx context.Context, n int, limit time.Duration) error {
	var want []netip.Addr
	for i := 1; i <= n; i++ {
		want = append(want, f.e.Lab.BalancerFrontAddr(i, false))
	}
	_, err := f.waitNextHops(ctx, limit, fmt.Sprintf("over nodes 1..%d %v", n, want), func(hops []netip.Addr) bool {
		return slices.Equal(hops, want)
	})
	return err
}

// waitNextHops polls the router's next hops for the VIP until done says so, and returns how long
// that took; it fails after limit, or when a daemon has exited.
func (f *fleet) waitNextHops(ctx context.Context, limit time.Duration, what string, done func([]netip.Addr) bool) (time.Duration, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var hops []netip.Addr
	for {
		var err error
		if hops, err = f.e.Lab.RouterNextHops(fleetVIP); err != nil {
			return 0, err
		}
		if done(hops) {
			return time.Since(start), nil
		}
		for i, d := range f.daemons {
			select {
			case <-d.exited:
				return 0, fmt.Errorf("sluice serve on node %d exited%s", i+1, f.lastLogs())
			default:
			}
		}
		select {
		case <-ctx.Done():
			if ctx.Err() == context.DeadlineExceeded {
				return 0, fmt.Errorf("the router does not route %s %s after %s: next hops %v%s", fleetVIP, what, limit, hops, f.lastLogs())
			}
			return 0, ctx.Err()
		case <-time.After(nextHopsPoll):
		}
	}
}

// lastLogs quotes the last lines each daemon logged, for an error: the lab's teardown removes the logs.
func (f *fleet) lastLogs() string {
	var b strings.Builder
	for i, d := range f.daemons {
		data, _ := os.ReadFile(d.log)
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		fmt.Fprintf(&b, "\nnode %d's last log lines:\n  %s", i+1, strings.Join(lines[max(len(lines)-4, 0):], "\n  "))
	}
	return b.String()
}

// failover cuts the last node off the network a third of the way into a run of length of new
// connections through every node, and measures the router's reconvergence and the requests.
func (f *fleet) failover(ctx context.Context, length time.Duration, ports *portRanges) (FleetFailover, error) {
	e, node := f.e, len(f.sockets)
	e.Progress.Step("%s failover: new connections through %d nodes, node %d cut at %s of %s", f.datapath, node, node, length/3, length)
	if err := e.Lab.SetClientPorts(ports.next(true)); err != nil {
		return FleetFailover{}, err
	}
	type result struct {
		reqs []request
		err  error
	}
	loaded := make(chan result, 1)
	start := time.Now()
	go func() {
		reqs, err := churn(ctx, e.Lab, netip.AddrPortFrom(fleetVIP.Addr(), vipPort), start, length)
		loaded <- result{reqs, err}
	}()
	cutAt := length / 3
	reconverged, err := f.cut(ctx, node, start.Add(cutAt))
	load := <-loaded // it ends at start+length, or at once if ctx ended
	if err := errors.Join(err, load.err, e.Lab.RestoreBalancer(node)); err != nil {
		return FleetFailover{}, err
	}
	fo := summarizeFailover(load.reqs, length, cutAt, cutAt+reconverged)
	fo.Datapath, fo.Nodes, fo.CutNode, fo.ReconvergenceS = f.datapath, node, node, reconverged.Seconds()
	return fo, nil
}

// cut cuts node off the network at the time at and returns how long the router then took to
// stop routing the VIP via it.
func (f *fleet) cut(ctx context.Context, node int, at time.Time) (time.Duration, error) {
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(time.Until(at)):
	}
	cut := time.Now()
	if err := f.e.Lab.CutBalancer(node); err != nil {
		return 0, err
	}
	gone := f.e.Lab.BalancerFrontAddr(node, false)
	if _, err := f.waitNextHops(ctx, reconvergeLimit, fmt.Sprintf("without node %d", node), func(hops []netip.Addr) bool {
		return !slices.Contains(hops, gone)
	}); err != nil {
		return 0, err
	}
	return time.Since(cut), nil
}

// request is one request of the failover load: when it started and ended (since the load
// started), and whether it was answered in time.
type request struct {
	start, end time.Duration
	ok         bool
}

// churn makes one-request connections to to from the lab's client, failoverWorkers at a time,
// from start for length, and returns every request.
func churn(ctx context.Context, l *lab.Lab, to netip.AddrPort, start time.Time, length time.Duration) ([]request, error) {
	var mu sync.Mutex
	var all []request
	var wg sync.WaitGroup
	errs := make([]error, failoverWorkers)
	for w := range failoverWorkers {
		wg.Go(func() {
			var mine []request
			errs[w] = l.Do(l.ClientNS(), func() error {
				for ctx.Err() == nil && time.Since(start) < length {
					t0 := time.Now()
					ok := httpOnce(to, t0.Add(failoverTimeout))
					mine = append(mine, request{start: t0.Sub(start), end: time.Since(start), ok: ok})
				}
				return nil
			})
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return all, errors.Join(errs...)
}

// httpOnce makes one HTTP/1.0 request on a new connection and tells whether a 200 came back,
// with the whole body, before deadline.
func httpOnce(to netip.AddrPort, deadline time.Time) bool {
	c, err := (&net.Dialer{Deadline: deadline}).Dial("tcp", to.String())
	if err != nil {
		return false
	}
	defer c.Close()
	if c.SetDeadline(deadline) != nil {
		return false
	}
	if _, err := fmt.Fprintf(c, "GET / HTTP/1.0\r\nHost: %s\r\n\r\n", to.Addr()); err != nil {
		return false
	}
	br := bufio.NewReader(c)
	status, err := br.ReadString('\n')
	if err != nil || !strings.Contains(status, " 200 ") {
		return false
	}
	_, err = io.Copy(io.Discard, br)
	return err == nil
}

// summarizeFailover counts a run of length whose node was cut at cutAt and which the router
// stopped using at reconverged: answered requests/s before the cut and after the reconvergence
// (by when they ended, within the run), and the requests that failed.
func summarizeFailover(reqs []request, length, cutAt, reconverged time.Duration) FleetFailover {
	fo := FleetFailover{DurationS: length.Seconds(), CutAtS: cutAt.Seconds(), Requests: len(reqs),
		TimeoutS: failoverTimeout.Seconds(), Workers: failoverWorkers}
	var before, after int
	for _, r := range reqs {
		switch {
		case !r.ok:
			fo.Failed++
			if r.start >= reconverged {
				fo.FailedAfter++
			}
		case r.end < cutAt:
			before++
		case r.end >= reconverged && r.end < length:
			after++
		}
	}
	if cutAt > 0 {
		fo.RPSBefore = float64(before) / cutAt.Seconds()
	}
	if reconverged < length {
		fo.RPSAfter = float64(after) / (length - reconverged).Seconds()
	}
	return fo
}

// Table renders the results for people: a block per datapath and workload, a row per way
// through the router, then the failovers.
func (r *FleetResults) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sluice-lab bench fleet: up to %d Sluice nodes (DSR) behind a BIRD router spreading the VIP by ECMP, %d backends, %d round(s) of %s, medians\n",
		r.Options.Nodes, r.Backends, r.Options.Rounds, r.Options.Duration)
	fmt.Fprintf(&b, "%s\n\n", r.Note)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "DATAPATH\tWORKLOAD\tTHROUGH\tREQ/S\tVS 1 NODE\tVS DIRECT\tP50\tP99\tERRORS\t")
	for _, dp := range r.Options.Datapaths {
		for _, w := range r.Workloads {
			for n := range r.Options.Nodes + 1 {
				c, _ := r.Cell(dp, w.Name, n)
				dpLabel, wLabel := "", ""
				if n == 0 {
					dpLabel, wLabel = dp, w.Name
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.1f%%\t%.1f%%\t%s\t%s\t%d\t\n", dpLabel, wLabel, through(n), thousands(c.RPS),
					100*c.RatioOne, 100*c.RatioDirect, micros(c.P50US), micros(c.P99US), c.Errors)
			}
		}
	}
	tw.Flush()
	b.WriteString("\ndirect: the same router spreads the client's connections over the backends itself (lab.Anycast4), no balancer.\n")
	b.WriteString("k nodes: the router spreads the VIP over nodes 1..k by ECMP; the others are drained (sluice node drain).\n")
	if len(r.Failover) == 0 {
		return b.String()
	}
	fo := r.Failover[0]
	fmt.Fprintf(&b, "\nfailover: %d clients making one request per connection through all nodes for %gs; the last node is cut off the network (switch ports down) at %gs; a request not answered within %gs failed\n\n",
		fo.Workers, fo.DurationS, fo.CutAtS, fo.TimeoutS)
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "DATAPATH\tNODES\tCUT\tRECONVERGED AFTER\tREQ/S BEFORE\tREQ/S AFTER\tREQUESTS\tFAILED\tFAILED AFTER RECONVERGENCE\t")
	for _, f := range r.Failover {
		after := thousands(f.RPSAfter)
		if f.CutAtS+f.ReconvergenceS >= f.DurationS {
			after = "- (the run ended first)"
		}
		fmt.Fprintf(tw, "%s\t%d\tnode %d\t%.2fs\t%s\t%s\t%d\t%d\t%d\t\n", f.Datapath, f.Nodes, f.CutNode, f.ReconvergenceS,
			thousands(f.RPSBefore), after, f.Requests, f.Failed, f.FailedAfter)
	}
	tw.Flush()
	b.WriteString("\nRECONVERGED AFTER: from the cut until the router's route for the VIP no longer lists the node (BGP hold time 3s).\n")
	return b.String()
}
