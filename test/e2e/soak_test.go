package e2e

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/sluicelb/sluice/internal/api"
	"github.com/sluicelb/sluice/internal/engine"
	"github.com/sluicelb/sluice/internal/lab"
)

// envSoak sets the soak's length (SLUICE_SOAK=3m); unset, TestSoak skips, so `make test` stays fast.
const envSoak = "SLUICE_SOAK"

// The soak's shape.
const (
	soakPortFirst   = 21000 // the churn reuses soakPorts client ports from here
	soakPorts       = 64
	soakChangeEvery = 500 * time.Millisecond // one API change each
	soakHoldMin     = 10 * time.Second       // the victim's server stays stopped or started this long,
	soakHoldMax     = 15 * time.Second       // up to this long
	soakDecideLimit = 30 * time.Second       // a health decision not seen within this is missing
	soakSettle      = 3 * time.Second        // between the end of the load and the last footprint
	soakSampleEvery = 5 * time.Second        // footprint samples during the soak
	soakMetrics     = "127.0.0.1:9475"       // the daemon's metrics listener, in the balancer namespace
	soakVictim      = 2                      // b2's server is stopped and started
	soakSpare       = 3                      // b3 is drained, undrained, removed and added through the API
)

// TestSoak runs, for SLUICE_SOAK, one-request connections from reused client ports through an nft
// and an ebpf nat service while API changes arrive every half second and one backend's server
// is stopped and started every 10-15 s under a fast health check. It fails on a request that
// failed after the daemon's health decision took effect (announced, in the kernel, and on nft the
// fallen backend's stale flows dropped), an API change or apply that failed, a decision never
// taken, or the daemon's death; it reports everything else, timings and the daemon's footprint
// before and after, in one table.
func TestSoak(t *testing.T) {
	text := os.Getenv(envSoak)
	if text == "" {
		t.Skipf("set %s to a duration (e.g. %s=3m) to run the soak", envSoak, envSoak)
	}
	length, err := time.ParseDuration(text)
	if err != nil || length <= 0 {
		t.Fatalf("%s=%q: want a positive duration such as 3m", envSoak, text)
	}
	requireLab(t)
	for _, f := range []Flavor{nftFlavors[0], ebpfFlavors[0]} {
		t.Run(f.Datapath+"-"+f.Name, func(t *testing.T) { soak(t, f, length) })
	}
}

func soak(t *testing.T, f Flavor, length time.Duration) {
	svc := webService("maglev", equalPool(false))
	svc.Extra = []string{fmt.Sprintf("health_check: {type: http, path: /status, interval: %s, timeout: %s, rise: %d, fall: %d}",
		checkInterval, checkTimeout, checkRise, checkFall)}
	freshBalancer(t)
	t.Cleanup(func() { flush(t) })
	d := startDaemonWithMetrics(t, writeConfig(t, "sluice.yaml", f.Config(svc)), soakMetrics)
	t.Cleanup(func() { _ = theLab.StartBackend(context.Background(), soakVictim) })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	client := api.NewUnixClient(d.socket)
	events := followEvents(ctx, client)
	pid := d.cmd.Process.Pid
	before, err := measureFootprint(pid, soakMetrics)
	if err != nil {
		t.Fatal(err)
	}
	statusBefore, err := client.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}

	origin := time.Now()
	samples := sampleFootprint(t, pid)
	load := startChurn(t, origin, origin.Add(length), svc.Addr())
	changes := startChanges(t, d, origin)
	flaps := flapVictim(ctx, t, f, client, events, origin, length)
	load.finish()
	elapsed := time.Since(origin)
	changes.finish()
	peak, sampleErrs := samples.finish()

	// Back to the file (the spare present, b1's weight 1) with the victim up, then let it settle.
	if err := theLab.StartBackend(ctx, soakVictim); err != nil {
		t.Fatal(err)
	}
	if r := d.cli("apply", "-f", d.config); r.Err != nil {
		t.Errorf("apply of the file after the soak: %v\n%s", r.Err, r.Stderr)
	}
	time.Sleep(soakSettle)
	after, err := measureFootprint(pid, soakMetrics)
	if err != nil {
		t.Errorf("footprint after the soak: %v", err)
	}
	statusAfter, err := client.Status(ctx)
	if err != nil {
		t.Errorf("status after the soak: %v", err)
	}
	if dead, why := d.exited(); dead {
		t.Errorf("the daemon died during the soak: %v", why)
	}

	seen, pollErrs := events.all()
	v := classify(load.requests(), flaps)
	t.Log(soakReport(f, length, elapsed, v, flaps, changes, seen, before, after, peak, sampleErrs, statusBefore.Apply, statusAfter.Apply))

	if v.after.failed > 0 {
		t.Errorf("%d requests failed after a health decision had taken effect; first:\n  %s", v.after.failed, strings.Join(v.afterErrs, "\n  "))
	}
	if v.before.failed > 0 {
		t.Errorf("%d requests failed before the first flap; first:\n  %s", v.before.failed, strings.Join(v.beforeErrs, "\n  "))
	}
	for i, fl := range flaps {
		if !fl.decided {
			t.Errorf("flap %d (%s at %v): no decision: %s", i+1, fl.what(), fl.action.Round(time.Millisecond), fl.missing)
		}
	}
	if len(changes.errs) > 0 {
		t.Errorf("%d of %d API changes failed; first:\n  %s", len(changes.errs), changes.made, strings.Join(changes.errs[:min(len(changes.errs), keptErrors)], "\n  "))
	}
	if n := statusAfter.Apply.Failures - statusBefore.Apply.Failures; n > 0 {
		t.Errorf("%d datapath applies failed during the soak (last: %s)", n, statusAfter.Apply.LastError)
	}
	if len(pollErrs) > 0 {
		t.Errorf("%d event polls failed; first: %s", len(pollErrs), pollErrs[0])
	}
}

// soakRequest is one request of the churn, its times offsets from the soak's start.
type soakRequest struct {
	start, end time.Duration
	backend    int   // the lab backend that answered, 0 when it failed
	err        error // why it failed
}

// churn makes one-request connections to the VIP from a pool of reused client ports, with the
// suite's number of workers, as fast as they go until the soak's end (or finished before).
type churn struct {
	background
	origin time.Time
	end    time.Time
	parts  [][]soakRequest // per worker, appended by that worker only
}

func startChurn(t *testing.T, origin, end time.Time, vip netip.AddrPort) *churn {
	c := &churn{background: background{stop: make(chan struct{})}, origin: origin, end: end, parts: make([][]soakRequest, workers)}
	ports := newReusedPorts(soakPortFirst, soakPorts)
	for w := range workers {
		c.wg.Go(func() {
			err := inClient(func() error {
				for time.Now().Before(c.end) {
					select {
					case <-c.stop:
						return nil
					default:
					}
					start := time.Since(c.origin)
					backend, err := ports.httpOnce(vip)
					c.parts[w] = append(c.parts[w], soakRequest{start: start, end: time.Since(c.origin), backend: backendIndex(backend), err: err})
				}
				return nil
			})
			if err != nil {
				at := time.Since(c.origin)
				c.parts[w] = append(c.parts[w], soakRequest{start: at, end: at, err: fmt.Errorf("worker %d: %w", w, err)})
			}
		})
	}
	t.Cleanup(c.finish)
	return c
}

// requests are every request made, once finished.
func (c *churn) requests() []soakRequest { return slices.Concat(c.parts...) }

// apiChanges makes one change through the daemon every soakChangeEvery with the CLI, cycling
// through b1's weight and the spare backend's drain, undrain, removal and return. b1 keeps a
// weight throughout, so a healthy backend always takes new flows.
type apiChanges struct {
	stop, done chan struct{}
	once       sync.Once
	made       int
	kinds      map[string]int // changes made, by command
	errs       []string
}

func startChanges(t *testing.T, d *daemon, origin time.Time) *apiChanges {
	b1, spare := theLab.BackendAddr(1, false).String(), theLab.BackendAddr(soakSpare, false).String()
	steps := [][]string{
		{"backend", "weight", "web", b1, "2"},
		{"backend", "drain", "web", spare, "--no-wait", "--timeout", "10s"},
		{"backend", "weight", "web", b1, "3"},
		{"backend", "weight", "web", spare, "1"}, // undrain
		{"backend", "weight", "web", b1, "1"},
		{"backend", "rm", "web", spare},
		{"backend", "weight", "web", b1, "2"},
		{"backend", "add", "web", spare},
	}
	a := &apiChanges{stop: make(chan struct{}), done: make(chan struct{}), kinds: map[string]int{}}
	t.Cleanup(a.finish)
	go func() {
		defer close(a.done)
		tick := time.NewTicker(soakChangeEvery)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-a.stop:
				return
			case <-tick.C:
			}
			step := steps[i%len(steps)]
			r := d.cli(step...)
			a.made++
			a.kinds[step[1]]++
			if r.Err != nil {
				a.errs = append(a.errs, fmt.Sprintf("at %v: sluice %s: %v: %s", time.Since(origin).Round(time.Millisecond),
					strings.Join(step, " "), r.Err, strings.TrimSpace(r.Stderr)))
			}
		}
	}()
	return a
}

func (a *apiChanges) finish() {
	a.once.Do(func() { close(a.stop) })
	<-a.done
}

// flap is one stop or start of the victim's server and the health decision that followed, its
// times offsets from the soak's start.
type flap struct {
	down      bool          // the server was stopped (else started)
	action    time.Duration // when it was stopped or started
	announced time.Duration // when the daemon's backend_down or backend_up event was seen
	applied   time.Duration // when then the kernel held it
	effective time.Duration // when it took effect: applied, and for an nft fall the stale flows dropped
	decided   bool
	missing   string // what was not seen, when not decided
}

func (fl flap) what() string {
	if fl.down {
		return "stop " + lab.BackendName(soakVictim)
	}
	return "start " + lab.BackendName(soakVictim)
}

// flapVictim stops and starts the victim's server every soakHoldMin-soakHoldMax until the soak's
// length has passed, following each health decision until it takes effect; it returns at the end.
func flapVictim(ctx context.Context, t *testing.T, f Flavor, c *api.Client, events *eventFollower, origin time.Time, length time.Duration) []flap {
	hold := func() time.Duration { return soakHoldMin + rand.N(soakHoldMax-soakHoldMin) }
	var flaps []flap
	down := false
	// The last flap leaves its decision some time to be measured against before the end.
	for next := origin.Add(hold()); next.Add(soakHoldMin / 2).Before(origin.Add(length)); {
		time.Sleep(time.Until(next))
		down = !down
		from := events.lastID()
		at := time.Now()
		var err error
		if down {
			err = theLab.StopBackend(ctx, soakVictim)
		} else {
			err = theLab.StartBackend(ctx, soakVictim)
		}
		if err != nil {
			t.Fatal(err)
		}
		flaps = append(flaps, decide(ctx, f, c, events, flap{down: down, action: at.Sub(origin)}, from, origin))
		next = at.Add(hold())
	}
	time.Sleep(time.Until(origin.Add(length)))
	return flaps
}

// decide follows a flap's decision: the victim's event after the event ID from, then its weight
// in the kernel (0 when down), then for an nft fall the flows_reset event of its stale flows.
func decide(ctx context.Context, f Flavor, c *api.Client, events *eventFollower, fl flap, from uint64, origin time.Time) flap {
	addr := theLab.BackendAddr(soakVictim, false).String()
	victim := func(kind string) func(engine.Event) bool {
		return func(e engine.Event) bool {
			return e.Type == kind && (e.Backend == addr || strings.HasPrefix(e.Backend, addr+":"))
		}
	}
	kind, want := engine.EventBackendUp, func(w int) bool { return w > 0 }
	if fl.down {
		kind, want = engine.EventBackendDown, func(w int) bool { return w == 0 }
	}
	ev, ok := events.await(from, soakDecideLimit, victim(kind))
	if !ok {
		fl.missing = fmt.Sprintf("no %s event within %v", kind, soakDecideLimit)
		return fl
	}
	fl.announced = ev.Seen.Sub(origin)
	limit := time.Now().Add(soakDecideLimit)
	for {
		w, err := kernelWeight(ctx, c, "web", addr)
		if err == nil && want(w) {
			break
		}
		if time.Now().After(limit) {
			fl.missing = fmt.Sprintf("%s announced, but the kernel's weight is %d (%v) after %v", kind, w, err, soakDecideLimit)
			return fl
		}
		time.Sleep(20 * time.Millisecond)
	}
	fl.applied = time.Since(origin)
	if fl.down && f.Datapath == "nft" {
		if _, ok := events.await(ev.ID, soakDecideLimit, victim(engine.EventFlowsReset)); !ok {
			fl.missing = fmt.Sprintf("no flows_reset event within %v of the fall", soakDecideLimit)
			return fl
		}
	}
	fl.effective, fl.decided = time.Since(origin), true
	return fl
}

// kernelWeight is the weight the kernel holds for a backend of a service, -1 when absent.
func kernelWeight(ctx context.Context, c *api.Client, service, addr string) (int, error) {
	s, err := c.Service(ctx, service)
	if err != nil {
		return -1, err
	}
	for _, b := range s.Backends {
		if b.Address == addr {
			return b.ProgrammedWeight, nil
		}
	}
	return -1, nil
}

// footprintSampler samples the daemon's footprint every soakSampleEvery and keeps the highest.
type footprintSampler struct {
	stop, done chan struct{}
	once       sync.Once
	peak       footprint
	errs       int
}

func sampleFootprint(t *testing.T, pid int) *footprintSampler {
	s := &footprintSampler{stop: make(chan struct{}), done: make(chan struct{})}
	t.Cleanup(func() { s.finish() })
	go func() {
		defer close(s.done)
		tick := time.NewTicker(soakSampleEvery)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
			fp, err := measureFootprint(pid, soakMetrics)
			if err != nil {
				s.errs++
				continue
			}
			s.peak = footprint{RSS: max(s.peak.RSS, fp.RSS), PeakRSS: max(s.peak.PeakRSS, fp.PeakRSS), Threads: max(s.peak.Threads, fp.Threads),
				FDs: max(s.peak.FDs, fp.FDs), Goroutines: max(s.peak.Goroutines, fp.Goroutines), Conntrack: max(s.peak.Conntrack, fp.Conntrack)}
		}
	}()
	return s
}

// finish stops the sampling; it returns the highest values and how many samples failed.
func (s *footprintSampler) finish() (footprint, int) {
	s.once.Do(func() { close(s.stop) })
	<-s.done
	return s.peak, s.errs
}

// counted is a number of requests and how many of them failed.
type counted struct{ requests, failed int }

func (c *counted) add(r soakRequest) {
	c.requests++
	if r.err != nil {
		c.failed++
	}
}

// verdict sorts the churn's requests by when they ran against the flaps: before the first one;
// in a flap's window, from the stop or start (or before, for a request still running then) to
// its decision taking effect; or after the decision, started once it had taken effect and ended
// before the next stop or start.
type verdict struct {
	total, before, after counted
	window               []counted // per flap
	applied              []counted // per flap: the part of its window started once the kernel held the decision
	afterFlap            []counted // per flap
	perBackend           map[string]int
	beforeErrs           []string
	afterErrs            []string // with their times and flap
}

func classify(requests []soakRequest, flaps []flap) verdict {
	v := verdict{window: make([]counted, len(flaps)), applied: make([]counted, len(flaps)), afterFlap: make([]counted, len(flaps)), perBackend: map[string]int{}}
	note := func(errs *[]string, r soakRequest, where string) {
		if r.err != nil && len(*errs) < keptErrors {
			*errs = append(*errs, fmt.Sprintf("%v-%v %s: %v", r.start.Round(time.Millisecond), r.end.Round(time.Millisecond), where, r.err))
		}
	}
	for _, r := range requests {
		v.total.add(r)
		if r.err == nil {
			v.perBackend[lab.BackendName(r.backend)]++
		}
		// The last flap that began before the request ended.
		k := -1
		for i, fl := range flaps {
			if fl.action <= r.end {
				k = i
			}
		}
		switch {
		case k < 0:
			v.before.add(r)
			note(&v.beforeErrs, r, "before the first flap")
		case !flaps[k].decided || r.start < flaps[k].effective:
			v.window[k].add(r)
			if flaps[k].applied > 0 && r.start >= flaps[k].applied {
				v.applied[k].add(r)
			}
		default:
			v.after.add(r)
			v.afterFlap[k].add(r)
			note(&v.afterErrs, r, fmt.Sprintf("after flap %d (%s)", k+1, flaps[k].what()))
		}
	}
	return v
}

// soakReport is the soak's summary table.
func soakReport(f Flavor, length, elapsed time.Duration, v verdict, flaps []flap, changes *apiChanges, events []seenEvent,
	before, after, peak footprint, sampleErrs int, applyBefore, applyAfter engine.ApplyStats) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "\nsoak %s/%s, %v (%s=%v): %d workers from %d reused client ports, an API change every %v, %s stopped and started every %v-%v\n",
		f.Datapath, f.Name, elapsed.Round(time.Millisecond), envSoak, length, workers, soakPorts, soakChangeEvery,
		lab.BackendName(soakVictim), soakHoldMin, soakHoldMax)
	fmt.Fprintf(w, "health check\thttp /status, interval %v, timeout %v, rise %d, fall %d\n", checkInterval, checkTimeout, checkRise, checkFall)
	fmt.Fprintf(w, "requests\t%d (%.0f/s), %d failed; per backend %v\n", v.total.requests, float64(v.total.requests)/elapsed.Seconds(), v.total.failed, v.perBackend)
	var downWin, upWin counted
	for i, fl := range flaps {
		if fl.down {
			downWin.requests += v.window[i].requests
			downWin.failed += v.window[i].failed
		} else {
			upWin.requests += v.window[i].requests
			upWin.failed += v.window[i].failed
		}
	}
	fmt.Fprintf(w, "  before the first flap\t%d, %d failed\n", v.before.requests, v.before.failed)
	fmt.Fprintf(w, "  in flap windows (action to decision in effect)\t%d, %d failed (after a stop: %d of %d; after a start: %d of %d)\n",
		downWin.requests+upWin.requests, downWin.failed+upWin.failed, downWin.failed, downWin.requests, upWin.failed, upWin.requests)
	fmt.Fprintf(w, "  after a decision in effect (must be 0 failed)\t%d, %d failed\n", v.after.requests, v.after.failed)
	decided := 0
	for _, fl := range flaps {
		if fl.decided {
			decided++
		}
	}
	fmt.Fprintf(w, "health decisions\t%d of %d flaps decided\n", decided, len(flaps))
	fmt.Fprintf(w, "API changes\t%d made, %d failed; %v\n", changes.made, len(changes.errs), changes.kinds)
	fmt.Fprintf(w, "datapath applies\t%d (%d failed)\n", applyAfter.Applies-applyBefore.Applies, applyAfter.Failures-applyBefore.Failures)
	byType := map[string]int{}
	downs := map[string]int{}
	for _, e := range events {
		byType[e.Type]++
		if e.Type == engine.EventBackendDown {
			downs[e.Backend]++
		}
	}
	fmt.Fprintf(w, "events\t%s; backend_down by backend %v\n", sortedCounts(byType), downs)
	mb := func(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }
	fmt.Fprintf(w, "daemon RSS\t%s before, %s after (highest sample %s, VmHWM %s)\n", mb(before.RSS), mb(after.RSS), mb(peak.RSS), mb(after.PeakRSS))
	fmt.Fprintf(w, "daemon goroutines\t%d before, %d after (highest sample %d)\n", before.Goroutines, after.Goroutines, peak.Goroutines)
	fmt.Fprintf(w, "daemon fds, threads\t%d, %d before; %d, %d after (highest %d, %d)\n", before.FDs, before.Threads, after.FDs, after.Threads, peak.FDs, peak.Threads)
	fmt.Fprintf(w, "balancer conntrack\t%d before, %d after (highest sample %d)\n", before.Conntrack, after.Conntrack, peak.Conntrack)
	if sampleErrs > 0 {
		fmt.Fprintf(w, "footprint samples\t%d failed\n", sampleErrs)
	}
	w.Flush()

	w = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	// Times are from the flap's action; "failed once applied" is the part of the window's failures
	// started after the kernel held the decision (on nft, before the stale flows were dropped).
	fmt.Fprintln(w, "\n#\taction\tat\tevent\tapplied\tin effect\twindow requests\twindow failed\tfailed once applied\tafter requests\tafter failed\t")
	since := func(at, from time.Duration) string {
		if at == 0 {
			return "-"
		}
		return "+" + (at - from).Round(time.Millisecond).String()
	}
	for i, fl := range flaps {
		effect := since(fl.effective, fl.action)
		if !fl.decided {
			effect = fl.missing
		}
		fmt.Fprintf(w, "%d\t%s\t%v\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t\n", i+1, fl.what(), fl.action.Round(time.Millisecond),
			since(fl.announced, fl.action), since(fl.applied, fl.action), effect,
			v.window[i].requests, v.window[i].failed, v.applied[i].failed, v.afterFlap[i].requests, v.afterFlap[i].failed)
	}
	w.Flush()
	return b.String()
}

// sortedCounts prints a count per name, sorted by name.
func sortedCounts(counts map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
	}
	return strings.Join(parts, ", ")
}
