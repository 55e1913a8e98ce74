package bench

// `sluice-lab bench scale`: how the datapath's cost grows with the configuration. For each size (a
// number of services with a fixed number of backends each) and each datapath it measures, from
// an empty balancer: the time to apply the whole config, the time to add one backend to one
// service (one-shot `sluice apply -f`, and through a running daemon), the daemon's and the
// kernel's memory, and requests per second through one real service. The cost of one change
// should not grow with the size of the rest.

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/procfs"

	"github.com/sluicelb/sluice/internal/api"
	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/lab"
	"github.com/sluicelb/sluice/internal/maglev"
)

// ScaleOptions configure the scale benchmark.
type ScaleOptions struct {
	// Datapaths are the datapaths measured, each over every size.
	Datapaths []string `json:"datapaths"`
	// Services are the sizes, in services, measured in this order.
	Services []int `json:"services"`
	// BackendsPerService is every service's backend count.
	BackendsPerService int `json:"backends_per_service"`
	// Reps is how many times one backend is added (median reported).
	Reps int `json:"reps"`
	// Limit bounds each step; a size whose step takes longer is reported as not reached, and
	// the larger sizes are skipped.
	Limit time.Duration `json:"limit_ns"`
	// Load is the duration of each wrk run; Rounds runs at each size give its median.
	Load   time.Duration `json:"load_ns"`
	Rounds int           `json:"rounds"`
}

// MaxScaleServices is the largest size: services past the first listen on 10.92.0.0/16.
const MaxScaleServices = 1 << 16

// Check reports the first option out of range, naming its flag.
func (o ScaleOptions) Check() error {
	if err := firstError(
		checkDatapaths("datapath", o.Datapaths),
		checkCount("backends-per-service", o.BackendsPerService, 1),
		checkCount("reps", o.Reps, 1),
		checkCount("rounds", o.Rounds, 1),
		checkDuration("limit", o.Limit, 0),
		checkDuration("duration", o.Load, 0),
	); err != nil {
		return err
	}
	if o.Load+time.Second >= o.Limit {
		return fmt.Errorf("--limit: %s leaves no room for the --duration %s of wrk", o.Limit, o.Load)
	}
	if len(o.Services) == 0 {
		return errors.New("--services: no size given")
	}
	for _, n := range o.Services {
		if n < 1 || n > MaxScaleServices {
			return fmt.Errorf("--services: %d is not in 1-%d", n, MaxScaleServices)
		}
	}
	return nil
}

// ScaleResult is one datapath at one size. Times are in seconds; a figure that was not measured
// (the size was not reached) is 0.
type ScaleResult struct {
	Datapath string `json:"datapath"`
	Services int    `json:"services"`
	Backends int    `json:"backends"`
	// NotReached tells why the size was not measured completely; empty when it was.
	NotReached string `json:"not_reached,omitempty"`
	// ApplyAll is `sluice apply -f` of the whole config on an empty balancer.
	ApplyAll float64 `json:"apply_all_s"`
	// AddOneApply is the median `sluice apply -f` of the same config with one more backend;
	// AddOnePlan the median `sluice plan -f` of one more backend than applied.
	AddOneApply float64 `json:"add_one_apply_s"`
	AddOnePlan  float64 `json:"add_one_plan_s"`
	// AddServiceApply is the median `sluice apply -f` of the config with one more service (of
	// as many backends as the others), RemoveServiceApply of the config without it again.
	AddServiceApply    float64 `json:"add_service_apply_s"`
	RemoveServiceApply float64 `json:"remove_service_apply_s"`
	// AddOneDaemon is the median time from `sluice backend add` until the daemon has applied it;
	// DaemonApply is the median time the daemon's datapath apply itself took.
	AddOneDaemon float64 `json:"add_one_daemon_s"`
	DaemonApply  float64 `json:"daemon_apply_s"`
	// DaemonStart is the time from starting `sluice serve` over the applied config until its
	// first apply is done (it starts from the last apply when the tables still hold it).
	DaemonStart float64 `json:"daemon_start_s"`
	// ApplyPeakMemory is the peak resident memory of `sluice apply` and the nft it runs, summed,
	// during ApplyAll, in bytes.
	ApplyPeakMemory int64 `json:"apply_peak_memory_bytes"`
	// Scrape is one GET /metrics of the daemon after the changes: its time, size and series.
	ScrapeSeconds float64 `json:"scrape_s"`
	ScrapeBytes   int64   `json:"scrape_bytes"`
	ScrapeSeries  int     `json:"scrape_series"`
	// DaemonRSS is the daemon's resident memory after the changes, in bytes.
	DaemonRSS int64 `json:"daemon_rss_bytes"`
	// KernelMemory is the growth of the kernel's unreclaimable slab, per-CPU and vmalloc memory
	// while the config was applied: approximate, as everything else on the machine moves it too.
	KernelMemory int64 `json:"kernel_memory_bytes"`
	// RequestsPerSecond is what wrk reached through the real service; Ratio is that over the
	// figure of the smallest size measured for the datapath.
	RequestsPerSecond float64 `json:"requests_per_second"`
	Ratio             float64 `json:"ratio"`
}

// ScaleReport is the scale benchmark's result.
type ScaleReport struct {
	Options ScaleOptions  `json:"options"`
	Results []ScaleResult `json:"results"`
}

// errNotReached marks a step that ran past the limit or failed, ending the size's measurement.
var errNotReached = errors.New("not reached")

// RunScale brings the lab up, measures every datapath at every size and tears the lab down;
// opts must pass Check. On failure the report holds what was measured.
func RunScale(ctx context.Context, env *Env, opts ScaleOptions) (ScaleReport, error) {
	report := ScaleReport{Options: opts}
	err := env.InLab(ctx, false, func() error {
		if err := os.MkdirAll(env.Dir(), 0o755); err != nil {
			return err
		}
		for _, dp := range opts.Datapaths {
			results, err := scaleDatapath(ctx, env, opts, dp)
			report.Results = append(report.Results, results...)
			if err != nil {
				return err
			}
		}
		return nil
	})
	return report, err
}

// scaleDatapath measures one datapath at every size, smallest first; once a size is not
// reached, the larger ones are skipped.
func scaleDatapath(ctx context.Context, env *Env, opts ScaleOptions, dp string) ([]ScaleResult, error) {
	var out []ScaleResult
	skip := ""
	for _, n := range opts.Services {
		s := scaleSize{env: env, opts: opts, cfg: scaleConfig{datapath: dp, services: n, perService: opts.BackendsPerService, real: labBackends(env.Lab)}}
		r := ScaleResult{Datapath: dp, Services: n, Backends: n * opts.BackendsPerService, NotReached: skip}
		if skip == "" {
			err := s.run(ctx, &r)
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			if err != nil && !errors.Is(err, errNotReached) {
				return out, err
			}
			if err != nil {
				r.NotReached = strings.TrimPrefix(err.Error(), errNotReached.Error()+": ")
				skip = fmt.Sprintf("skipped: %d services not reached", n)
			}
		}
		out = append(out, r)
	}
	setRatios(out)
	return out, nil
}

// setRatios divides each size's requests per second by the first one measured.
func setRatios(results []ScaleResult) {
	base := 0.0
	for i := range results {
		if base == 0 {
			base = results[i].RequestsPerSecond
		}
		if base > 0 && results[i].RequestsPerSecond > 0 {
			results[i].Ratio = results[i].RequestsPerSecond / base
		}
	}
}

// scaleSize measures one datapath at one size.
type scaleSize struct {
	env  *Env
	opts ScaleOptions
	cfg  scaleConfig
}

func (s *scaleSize) step(format string, args ...any) {
	s.env.Progress.Step("%s, %d services: %s", s.cfg.datapath, s.cfg.services, fmt.Sprintf(format, args...))
}

// run fills r step by step; an errNotReached ends the size, keeping what was measured so far.
func (s *scaleSize) run(ctx context.Context, r *ScaleResult) error {
	s.step("resetting the balancer")
	if err := s.env.ResetBalancer(ctx); err != nil {
		return err
	}
	before, err := kernelMemory()
	if err != nil {
		return err
	}
	s.step("applying the whole config")
	took, err := s.apply(ctx, "apply all", s.cfg.yaml(0), &r.ApplyPeakMemory)
	if err != nil {
		return err
	}
	r.ApplyAll = took.Seconds()
	after, err := kernelMemory()
	if err != nil {
		return err
	}
	r.KernelMemory = after - before
	if r.RequestsPerSecond, err = s.load(ctx); err != nil {
		return err
	}
	if r.AddOneApply, err = s.addOneApply(ctx); err != nil {
		return err
	}
	if r.AddServiceApply, r.RemoveServiceApply, err = s.oneService(ctx); err != nil {
		return err
	}
	if r.AddOnePlan, err = s.addOnePlan(ctx); err != nil {
		return err
	}
	err = s.daemon(ctx, r)
	return errors.Join(err, s.env.ResetBalancer(context.WithoutCancel(ctx)))
}

// bounded runs one step within the limit and while the machine has memory to spare; running
// past either, or failing, is errNotReached.
func (s *scaleSize) bounded(ctx context.Context, name string, step func(ctx context.Context) error) (time.Duration, error) {
	guarded, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	limited, cancel := context.WithTimeoutCause(guarded, s.opts.Limit, fmt.Errorf("took over %s", s.opts.Limit))
	defer cancel()
	go watchMemory(limited, stop)
	start := time.Now()
	err := step(limited)
	took := time.Since(start)
	switch {
	case ctx.Err() != nil:
		return took, ctx.Err()
	case limited.Err() != nil:
		return took, fmt.Errorf("%w: %s: %w", errNotReached, name, context.Cause(limited))
	case err != nil:
		return took, fmt.Errorf("%w: %s: %w", errNotReached, name, err)
	}
	return took, nil
}

// memoryFloor is the share of the machine's memory a step must leave available: the machine is
// shared, and nft needs about a kilobyte per element it reads in.
const memoryFloor = 0.25

// watchMemory stops a step (through stop) when the machine's available memory falls below the
// floor, until ctx ends.
func watchMemory(ctx context.Context, stop context.CancelCauseFunc) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		m, err := hostMemory(memAvailable, memTotal)
		if err != nil {
			continue
		}
		if floor := int64(memoryFloor * float64(m[1])); m[0] < floor {
			stop(fmt.Errorf("stopped: the machine's available memory fell below %s", mebibytes(floor)))
			return
		}
	}
}

// apply programs text, a config, through `sluice apply`; with peak, it records there the peak
// memory of sluice and nft.
func (s *scaleSize) apply(ctx context.Context, name, text string, peak *int64) (time.Duration, error) {
	path := filepath.Join(s.env.Dir(), "scale.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		return 0, err
	}
	return s.bounded(ctx, name, func(ctx context.Context) error {
		used, err := s.env.applyFile(ctx, path, peak != nil)
		if peak != nil {
			*peak = used
		}
		return err
	})
}

// addOneApply adds one backend at a time through `sluice apply` and returns the median time.
func (s *scaleSize) addOneApply(ctx context.Context) (float64, error) {
	var took []float64
	for k := 1; k <= s.opts.Reps; k++ {
		s.step("adding one backend with sluice apply (%d/%d)", k, s.opts.Reps)
		d, err := s.apply(ctx, "add one backend (apply)", s.cfg.yaml(k), nil)
		if err != nil {
			return 0, err
		}
		took = append(took, d.Seconds())
	}
	return Median(took), nil
}

// oneService adds one service through `sluice apply` and removes it again, Reps times, after
// addOneApply (whose last config it starts from and ends on), and returns the median times.
func (s *scaleSize) oneService(ctx context.Context) (add, remove float64, err error) {
	without := s.cfg.yaml(s.opts.Reps)
	with := without + s.cfg.extraService()
	var added, removed []float64
	for k := 1; k <= s.opts.Reps; k++ {
		s.step("adding and removing one service with sluice apply (%d/%d)", k, s.opts.Reps)
		d, err := s.apply(ctx, "add one service (apply)", with, nil)
		if err != nil {
			return 0, 0, err
		}
		added = append(added, d.Seconds())
		if d, err = s.apply(ctx, "remove one service (apply)", without, nil); err != nil {
			return 0, 0, err
		}
		removed = append(removed, d.Seconds())
	}
	return Median(added), Median(removed), nil
}

// addOnePlan asks `sluice plan -f` about one more backend than the applies added, Reps times, and
// returns the median time.
func (s *scaleSize) addOnePlan(ctx context.Context) (float64, error) {
	path := filepath.Join(s.env.Dir(), "scale-plan.yaml")
	if err := os.WriteFile(path, []byte(s.cfg.yaml(s.opts.Reps+1)), 0o644); err != nil {
		return 0, err
	}
	var took []float64
	for k := 1; k <= s.opts.Reps; k++ {
		s.step("planning one more backend with sluice plan (%d/%d)", k, s.opts.Reps)
		d, err := s.bounded(ctx, "add one backend (plan)", func(ctx context.Context) error {
			return s.env.planFile(ctx, path)
		})
		if err != nil {
			return 0, err
		}
		took = append(took, d.Seconds())
	}
	return Median(took), nil
}

// planFile runs `sluice plan -f path`, whose exit status 2 says that something would change.
func (e *Env) planFile(ctx context.Context, path string) error {
	err := run(e.sluiceCommand(ctx, "plan", "-f", path))
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 2 {
		return nil
	}
	return err
}

// load runs wrk with keep-alive connections from the client to the real service, a warm-up and
// then the rounds, and returns the median requests per second.
func (s *scaleSize) load(ctx context.Context) (float64, error) {
	w := wrkLoad{Targets: []netip.AddrPort{netip.AddrPortFrom(s.cfg.vip(0), 80)}, Threads: 2, Conns: 32, Path: "/"}
	var rps []float64
	for round := range s.opts.Rounds + 1 {
		w.Duration = s.opts.Load
		if round == 0 {
			w.Duration = time.Second // warm-up: ARP, nginx workers, caches
		} else {
			s.step("wrk through %s (%d/%d)", w.Targets[0], round, s.opts.Rounds)
		}
		_, err := s.bounded(ctx, "wrk", func(ctx context.Context) error {
			r, err := s.env.runWrk(ctx, w)
			if err == nil && r.Errors() > 0 {
				err = fmt.Errorf("wrk: %d of %d requests failed", r.Errors(), r.Requests)
			}
			if round > 0 {
				rps = append(rps, r.RPS())
			}
			return err
		})
		if err != nil {
			return 0, err
		}
	}
	return Median(rps), nil
}

// daemon starts `sluice serve` on the base config, adds one backend at a time with
// `sluice backend add` and records how long each took to reach the kernel, and the daemon's memory.
func (s *scaleSize) daemon(ctx context.Context, r *ScaleResult) error {
	s.step("starting sluice serve")
	d, started, err := s.startDaemon(ctx)
	if err != nil {
		return err
	}
	defer d.stop()
	r.DaemonStart = started.Seconds()
	var total, applied []float64
	for k := 1; k <= s.opts.Reps; k++ {
		s.step("adding one backend with sluice backend add (%d/%d)", k, s.opts.Reps)
		var apply time.Duration
		took, err := s.bounded(ctx, "add one backend (daemon)", func(ctx context.Context) error {
			var err error
			apply, err = d.addBackend(ctx, s.cfg.target(), s.cfg.extraBackend(k))
			return err
		})
		if err != nil {
			return err
		}
		total, applied = append(total, took.Seconds()), append(applied, apply.Seconds())
	}
	r.AddOneDaemon, r.DaemonApply = Median(total), Median(applied)
	s.step("scraping the daemon's metrics")
	if err := d.scrape(ctx, r); err != nil {
		return err
	}
	r.DaemonRSS, err = residentMemory(d.cmd.Process.Pid)
	return err
}

// metricsAddr is where the benchmark's daemon serves its metrics, inside the balancer namespace.
const metricsAddr = "127.0.0.1:9120"

// scrape reads the daemon's /metrics once, from inside the balancer namespace, and records its
// time, size and number of series.
func (d *scaleDaemon) scrape(ctx context.Context, r *ScaleResult) error {
	out := filepath.Join(d.env.Dir(), "metrics.txt")
	start := time.Now()
	if err := d.env.InNS(ctx, d.env.Lab.BalancerNS(), "curl", "-sSf", "--max-time", "120", "-o", out, "http://"+metricsAddr+"/metrics"); err != nil {
		return err
	}
	r.ScrapeSeconds = time.Since(start).Seconds()
	body, err := os.ReadFile(out)
	if err != nil {
		return err
	}
	r.ScrapeBytes = int64(len(body))
	for line := range strings.Lines(string(body)) {
		if line != "\n" && !strings.HasPrefix(line, "#") {
			r.ScrapeSeries++
		}
	}
	return os.Remove(out)
}

// scaleDaemon is a `sluice serve` started by the benchmark.
type scaleDaemon struct {
	*serveProcess
	env    *Env
	socket string
	client *api.Client
}

// startDaemon starts `sluice serve` on the base config in the balancer namespace, waits for its
// first apply and returns how long that took from the start.
func (s *scaleSize) startDaemon(ctx context.Context) (*scaleDaemon, time.Duration, error) {
	dir := s.env.Dir()
	file := filepath.Join(dir, "serve.yaml")
	// The benchmark's daemon keeps no state file: nothing is left on the host, nor carried from
	// one size to the next.
	if err := os.WriteFile(file, []byte("state: {persist: \"off\"}\n"+s.cfg.yaml(0)), 0o644); err != nil {
		return nil, 0, err
	}
	d := &scaleDaemon{env: s.env, socket: filepath.Join(dir, "sluice.sock")}
	d.client = api.NewUnixClient(d.socket)
	var err error
	start := time.Now()
	if d.serveProcess, err = s.env.startServe(s.env.Lab.BalancerNS(), file, d.socket, filepath.Join(dir, "serve.log"), "--metrics-listen", metricsAddr); err != nil {
		return nil, 0, err
	}
	_, err = s.bounded(ctx, "sluice serve's first apply", func(ctx context.Context) error {
		_, err := d.waitApplied(ctx, time.Time{}, 0)
		return err
	})
	if err != nil {
		d.stop()
		return nil, 0, err
	}
	return d, time.Since(start), nil
}

// pollInterval is how often the daemon's apply statistics are read while waiting.
const pollInterval = 5 * time.Millisecond

// waitApplied waits until the daemon has more than applies successful applies, the last one
// started after since, and returns how long that apply took.
func (d *scaleDaemon) waitApplied(ctx context.Context, since time.Time, applies uint64) (time.Duration, error) {
	for {
		st, err := d.client.Status(ctx)
		if err == nil && st.Apply.Applies > applies && st.Apply.LastApplied.Add(-st.Apply.LastDuration).After(since) {
			return st.Apply.LastDuration, nil
		}
		if err == nil && st.Apply.LastError != "" {
			return 0, fmt.Errorf("the daemon's apply failed: %s", st.Apply.LastError)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-d.exited:
			return 0, fmt.Errorf("sluice serve exited (see %s)", d.log)
		case <-time.After(pollInterval):
		}
	}
}

// addBackend runs `sluice backend add` against the daemon and waits until an apply that started
// after the command was sent is done: every apply from then on holds the new backend. It
// returns how long that apply took.
func (d *scaleDaemon) addBackend(ctx context.Context, service string, b netip.AddrPort) (time.Duration, error) {
	st, err := d.client.Status(ctx)
	if err != nil {
		return 0, err
	}
	sent := time.Now()
	if err := run(exec.CommandContext(ctx, d.env.Sluice, "--socket", d.socket, "backend", "add", service, b.String())); err != nil {
		return 0, err
	}
	return d.waitApplied(ctx, sent, st.Apply.Applies)
}

// memField is a field of /proc/meminfo: its name, and its value in bytes in procfs' Meminfo
// (nil where the kernel does not print it).
type memField struct {
	name  string
	bytes func(procfs.Meminfo) *uint64
}

// The meminfo fields the scale benchmark reads.
var (
	memTotal     = memField{"MemTotal", func(m procfs.Meminfo) *uint64 { return m.MemTotalBytes }}
	memAvailable = memField{"MemAvailable", func(m procfs.Meminfo) *uint64 { return m.MemAvailableBytes }}
	sUnreclaim   = memField{"SUnreclaim", func(m procfs.Meminfo) *uint64 { return m.SUnreclaimBytes }}
	percpu       = memField{"Percpu", func(m procfs.Meminfo) *uint64 { return m.PercpuBytes }}
	vmallocUsed  = memField{"VmallocUsed", func(m procfs.Meminfo) *uint64 { return m.VmallocUsedBytes }}
)

// hostMemory reads fields of the machine's /proc/meminfo, in bytes.
func hostMemory(fields ...memField) ([]int64, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return nil, err
	}
	return memBytes(fs, fields...)
}

// memBytes reads fields of fs's meminfo, in bytes, in the order asked; one the kernel does not
// print is an error naming it.
func memBytes(fs procfs.FS, fields ...memField) ([]int64, error) {
	m, err := fs.Meminfo()
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(fields))
	for i, f := range fields {
		v := f.bytes(m)
		if v == nil {
			return nil, fmt.Errorf("/proc/meminfo has no %s", f.name)
		}
		out[i] = int64(*v)
	}
	return out, nil
}

// kernelMemoryFields are where rulesets, maps and counters live: kmalloc'ed objects, per-CPU
// counters and large tables that kvmalloc puts in vmalloc space.
var kernelMemoryFields = []memField{sUnreclaim, percpu, vmallocUsed}

// kernelMemoryNames is the kernelMemoryFields' names, joined by +.
func kernelMemoryNames() string {
	names := make([]string, len(kernelMemoryFields))
	for i, f := range kernelMemoryFields {
		names[i] = f.name
	}
	return strings.Join(names, "+")
}

// kernelMemory is the sum of the kernelMemoryFields, in bytes.
func kernelMemory() (int64, error) {
	m, err := hostMemory(kernelMemoryFields...)
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, v := range m {
		sum += v
	}
	return sum, nil
}

// residentMemory is a process's resident set (VmRSS), in bytes.
func residentMemory(pid int) (int64, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, err
	}
	st, err := p.NewStatus()
	return int64(st.VmRSS), err
}

// scaleConfig generates the config of one size. Service svc0 takes the benchmark's traffic at
// lab.VIP4:80: the lab's real backends (at most perService of them) take it, padded to
// perService with weight-0 fake backends. Every other service listens on 10.92.0.0/16 and is
// spread over fake backends: nothing is sent to them. The target service gets the extra
// backends of the one-backend changes.
type scaleConfig struct {
	datapath             string
	services, perService int
	real                 []netip.Addr // the lab's backends
}

// fakeBackend is the j-th backend address nothing answers on: 10.91.2.100-249 on the lab's
// backend network (above the real backends), port 8080, then the same addresses on 8081, and so on.
func fakeBackend(j int) netip.AddrPort {
	const addrs = 150
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 91, 2, byte(100 + j%addrs)}), uint16(8080+j/addrs))
}

// vip is service i's VIP.
func (c scaleConfig) vip(i int) netip.Addr {
	if i == 0 {
		return netip.MustParseAddr(lab.VIP4)
	}
	return netip.AddrFrom4([4]byte{10, 92, byte(i >> 8), byte(i)})
}

func serviceName(i int) string { return "svc" + strconv.Itoa(i) }

// target is the service the one-backend changes go to: the last one (the real one at size 1,
// whose traffic is measured before the changes).
func (c scaleConfig) target() string { return serviceName(c.services - 1) }

// extraBackend is the k-th backend added to the target service (1-based).
func (c scaleConfig) extraBackend(k int) netip.AddrPort { return fakeBackend(c.perService + k - 1) }

// labBackends lists the lab's backend addresses.
func labBackends(l *lab.Lab) []netip.Addr {
	out := make([]netip.Addr, l.Backends)
	for i := range out {
		out[i] = l.BackendAddr(i+1, false)
	}
	return out
}

// yaml is the config with the first extra extra backends added to the target service.
func (c scaleConfig) yaml(extra int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "datapath: %s\n", c.datapath)
	if need := c.nftElements(); c.datapath == "nft" && need > config.DefaultNFTMaxElements {
		fmt.Fprintf(&b, "nft:\n  max_elements: %d\n", min(need, config.MaxNFTMaxElements))
	}
	b.WriteString("services:\n")
	for i := range c.services {
		fmt.Fprintf(&b, "  - name: %s\n    vip: %s\n    port: 80\n    backends:\n", serviceName(i), c.vip(i))
		var real []netip.Addr
		if i == 0 {
			real = c.real[:min(len(c.real), c.perService)]
		}
		for _, addr := range real {
			fmt.Fprintf(&b, "      - {address: %s}\n", addr)
		}
		for j := len(real); j < c.perService; j++ {
			weight := ""
			if i == 0 {
				weight = ", weight: 0"
			}
			writeBackend(&b, fakeBackend(j), weight)
		}
		if serviceName(i) == c.target() {
			for k := 1; k <= extra; k++ {
				writeBackend(&b, c.extraBackend(k), "")
			}
		}
	}
	return b.String()
}

// nftElements bounds the nftables elements and objects of the config with a few extra backends
// (the nft datapath's budget counts about 9 + 7B + M per nat service of B backends and M slots,
// and second chance's prev map M more), so that sizes past nft.max_elements' default are
// measured too.
func (c scaleConfig) nftElements() int {
	b := c.perService + 4
	return c.services * (20 + 8*b + 2*maglev.CompactSize(b))
}

// extraService is one service more than the config has, of as many backends, to append to its
// services.
func (c scaleConfig) extraService() string {
	var b strings.Builder
	fmt.Fprintf(&b, "  - name: %s\n    vip: %s\n    port: 80\n    backends:\n", serviceName(c.services), c.vip(c.services))
	for j := range c.perService {
		writeBackend(&b, fakeBackend(j), "")
	}
	return b.String()
}

func writeBackend(b *strings.Builder, ap netip.AddrPort, more string) {
	fmt.Fprintf(b, "      - {address: %s, port: %d%s}\n", ap.Addr(), ap.Port(), more)
}

// Table renders the report as a table.
func (r ScaleReport) Table() string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "datapath\tservices\tbackends\tapply all\tapply peak mem\tadd 1 (apply)\tadd 1 (plan)\tadd 1 (daemon)\tadd svc\tremove svc\tdaemon apply\tdaemon start\tdaemon RSS\tscrape\tseries\tkernel mem~\treq/s\tratio\t")
	for _, x := range r.Results {
		fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", x.Datapath, x.Services, x.Backends,
			seconds(x.ApplyAll), mebibytes(x.ApplyPeakMemory), seconds(x.AddOneApply), seconds(x.AddOnePlan), seconds(x.AddOneDaemon),
			seconds(x.AddServiceApply), seconds(x.RemoveServiceApply), seconds(x.DaemonApply),
			seconds(x.DaemonStart), mebibytes(x.DaemonRSS), seconds(x.ScrapeSeconds), figure(float64(x.ScrapeSeries), "%.0f"), mebibytes(x.KernelMemory),
			figure(x.RequestsPerSecond, "%.0f"), figure(x.Ratio, "%.2f"))
	}
	w.Flush()
	for _, x := range r.Results {
		if x.NotReached != "" {
			fmt.Fprintf(&b, "%s, %d services: not reached: %s\n", x.Datapath, x.Services, x.NotReached)
		}
	}
	fmt.Fprintf(&b, "apply peak mem: sluice apply and nft together; add 1: median of %d, one backend; add svc, remove svc: sluice apply of one service more, then less, median of as many; kernel mem~: growth of %s while applying, approximate (shared machine); req/s: median of %d wrk runs; ratio: over the smallest size's\n",
		r.Options.Reps, kernelMemoryNames(), r.Options.Rounds)
	return b.String()
}

// seconds writes a duration in seconds with a unit that suits it; "-" when not measured.
func seconds(s float64) string {
	switch {
	case s <= 0:
		return "-"
	case s < 1:
		return fmt.Sprintf("%.1fms", s*1000)
	default:
		return fmt.Sprintf("%.2fs", s)
	}
}

func mebibytes(n int64) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

func figure(v float64, format string) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf(format, v)
}
