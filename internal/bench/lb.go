package bench

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"

	"time"

	"github.com/sluicelb/sluice/internal/config"
)

// LBOptions configure `sluice-lab bench lb`.
type LBOptions struct {
	// Duration is the length of each load run; Rounds how many times every candidate gets every workload.
	Duration time.Duration
	Rounds   int
	// Rate is the offered load of the latency workload, requests/s, the same for every candidate.
	Rate int
	// Workloads and Candidates select by name; empty means all (all installed, for peers).
	Workloads  []string
	Candidates []string
	// Switch is how the lab's switch and the backends take frames, for every candidate alike.
	Switch Switch
	// KeepLab leaves the lab up afterwards.
	KeepLab bool
	// Profile samples the CPUs with perf during each load run and reports where the packet
	// path's kernel time went, in ns per request.
	Profile bool
	// Against names a candidate measured in the run: every other candidate's requests/s is also
	// given over its own, round by round (PairedRatio).
	Against string
}

// LBResults are what `sluice-lab bench lb` measured.
type LBResults struct {
	Duration string `json:"duration"`
	Rounds   int    `json:"rounds"`
	Rate     int    `json:"latency_rate"`
	Backends int    `json:"backends"`
	// Switch is how the lab's switch and the backends took frames: stack or xdp.
	Switch     Switch     `json:"switch"`
	Workloads  []Workload `json:"workloads"`
	Candidates []string   `json:"candidates"`
	// Missing are the peers that were not installed, so not measured.
	Missing []string `json:"missing_peers,omitempty"`
	// Against is the candidate the cells' paired ratios are to (--against), if any.
	Against string   `json:"against,omitempty"`
	Cells   []LBCell `json:"cells"`
}

// LBCell is one candidate under one workload: medians over the rounds, and the rounds.
type LBCell struct {
	Candidate string  `json:"candidate"`
	Workload  string  `json:"workload"`
	RPS       float64 `json:"requests_per_second"`
	// Ratio is RPS over direct's median RPS for the same workload; RatioECMP over ecmp's.
	Ratio     float64 `json:"ratio_to_direct"`
	RatioECMP float64 `json:"ratio_to_ecmp"`
	P50US     float64 `json:"p50_us"`
	P99US     float64 `json:"p99_us"`
	// CPU is the balancer's userspace processes' CPU in cores; absent for kernel datapaths,
	// whose work happens in softirq context and cannot be told apart from the lab's routing.
	CPU    *float64 `json:"balancer_cpu_cores,omitempty"`
	Errors int64    `json:"errors"`
	// Profile is the median, feature by feature, of the rounds' profiles (--profile).
	Profile Profile `json:"profile_ns_per_request,omitempty"`
	// CPUNS is the median of the rounds' CPUNS (--profile).
	CPUNS float64 `json:"cpu_ns_per_request,omitempty"`
	// Symbols are the symbols charged to a feature and the costliest others, by their median over
	// the rounds: what Profile's features are made of (--profile).
	Symbols []SymbolCost `json:"profile_symbols,omitempty"`
	// Paired is the requests/s over the --against candidate's, round by round.
	Paired *PairedRatio `json:"paired_ratio,omitempty"`
	Rounds []LBSample   `json:"rounds"`
}

// LBSample is one run of one candidate under one workload.
type LBSample struct {
	RPS    float64  `json:"requests_per_second"`
	P50US  float64  `json:"p50_us"`
	P99US  float64  `json:"p99_us"`
	CPU    *float64 `json:"balancer_cpu_cores,omitempty"`
	Errors int64    `json:"errors"`
	// Profile is where the packet path's kernel time went during the run (--profile).
	Profile Profile `json:"profile_ns_per_request,omitempty"`
	// CPUNS is the whole machine's CPU time per request during the run, every process but the
	// idle task and perf (--profile).
	CPUNS float64 `json:"cpu_ns_per_request,omitempty"`
	// Steal is the share of the machine's CPU time its hypervisor took during the run; absent
	// where /proc/stat cannot be read.
	Steal *float64 `json:"cpu_steal_share,omitempty"`
	// SwitchDrops is the share of the frames the lab's switch dropped at its ports during the run
	// (a full ring at the other end); absent where its ports cannot be read.
	SwitchDrops *float64 `json:"switch_drop_share,omitempty"`
	// Symbols are the run's symbols charged to a feature and the costliest others (--profile).
	Symbols []SymbolCost `json:"profile_symbols,omitempty"`
}

func (s LBSample) rps() float64 { return s.RPS }

// Cell returns the cell of candidate under workload, if measured.
func (r *LBResults) Cell(candidate, workload string) (LBCell, bool) {
	for _, c := range r.Cells {
		if c.Candidate == candidate && c.Workload == workload {
			return c, true
		}
	}
	return LBCell{}, false
}

// Check reports the first option out of range, naming its flag.
func (o LBOptions) Check() error {
	return firstError(
		checkDuration("duration", o.Duration, 0),
		checkCount("rounds", o.Rounds, 1),
		checkCount("rate", o.Rate, 1),
		checkSwitch(o.Switch),
	)
}

// RunLB brings up the lab and gives every candidate every workload, candidates interleaved
// within each round (in balanced orders: interleave), then reports medians. o must pass Check.
func RunLB(ctx context.Context, e *Env, o LBOptions) (res *LBResults, err error) {
	if err := wrkPath(); err != nil {
		return nil, fmt.Errorf("wrk not found (Debian package wrk): %w", err)
	}
	workloads, err := selectWorkloads(o.Workloads)
	if err != nil {
		return nil, err
	}
	candidates, missing, err := selectCandidates(o.Candidates)
	if err != nil {
		return nil, err
	}
	if err := checkAgainst(o.Against, candidates); err != nil {
		return nil, err
	}
	samples := map[[2]string][]LBSample{}
	ports := portRanges{}
	err = e.InLab(ctx, o.KeepLab, func() (err error) {
		if err := errors.Join(e.ResetBalancer(ctx), (&nftlbPeer{}).stop(ctx, e)); err != nil {
			return err
		}
		stopSwitch, err := startSwitch(e, o.Switch, false)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, stopSwitch()) }()
		return interleave(o.Rounds, len(candidates), func(round, i int) error {
			c := candidates[i]
			return e.measure(ctx, c, workloads, o, &ports, func(w string, s LBSample) {
				samples[[2]string{c.Name(), w}] = append(samples[[2]string{c.Name(), w}], s)
			}, roundLabel(round, o.Rounds))
		})
	})
	if err != nil {
		return nil, err
	}
	return summarize(o, e.Lab.Backends, workloads, candidates, missing, samples), nil
}

// measure sets candidate c up, runs every workload against it and tears it down.
func (e *Env) measure(ctx context.Context, c candidate, workloads []Workload, o LBOptions, ports *portRanges, record func(string, LBSample), round string) (err error) {
	e.Progress.Step("%s: setting up %s", round, c.Name())
	if err := c.start(ctx, e); err != nil {
		return fmt.Errorf("start %s: %w", c.Name(), err)
	}
	defer func() {
		if serr := c.stop(context.WithoutCancel(ctx), e); serr != nil {
			err = errors.Join(err, fmt.Errorf("stop %s: %w", c.Name(), serr))
		}
	}()
	for _, w := range workloads {
		e.Progress.Step("%s: %s, %s (%s)", round, c.Name(), w.Name, o.Duration)
		cpu, steal, drops := startCPUClock(c.pids()), startStealClock(), startSwitchDropClock(e)
		var prof *profiler
		if o.Profile {
			if prof, err = startProfile(ctx, os.TempDir()); err != nil {
				return err
			}
		}
		s, err := e.runWorkload(ctx, w, c.targets(e), o, ports)
		if prof != nil {
			run, perr := prof.stop(ctx, s.RPS*o.Duration.Seconds())
			s.Profile, s.CPUNS, s.Symbols = run.features, run.cpu, run.symbols
			err = errors.Join(err, perr)
		}
		if err != nil {
			return fmt.Errorf("%s, %s: %w", c.Name(), w.Name, err)
		}
		s.CPU, s.Steal, s.SwitchDrops = cpu.cores(), steal.share(), drops.share()
		record(w.Name, s)
	}
	return nil
}

// runWorkload runs workload w against targets (one wrk thread each) for o.Duration, from the
// next client port range.
func (e *Env) runWorkload(ctx context.Context, w Workload, targets []netip.AddrPort, o LBOptions, ports *portRanges) (LBSample, error) {
	if err := e.Lab.SetClientPorts(ports.next(w.PerConn)); err != nil {
		return LBSample{}, err
	}
	load := w.load(targets, o)
	load.Threads, load.Duration = len(load.Targets), o.Duration
	r, err := e.runWrk(ctx, load)
	if err != nil {
		return LBSample{}, err
	}
	return LBSample{RPS: r.RPS(), P50US: r.P50US, P99US: r.P99US, Errors: r.Errors()}, nil
}

// baselines are measured in every run, first: direct (one backend per wrk thread) and ecmp
// (each thread's connections spread over the backends by routing), every ratio's denominators.
var baselines = []candidate{direct{}, ecmp{}}

// onRequest are candidates measured only when named: nft nat and fullnat with
// nft.packet_counters off, which show what counting costs, and with every opt-out, and the nat
// and fullnat candidates run by a daemon with replication on and off, which show what
// replicating costs.
var onRequest = append([]candidate{
	sluiceCandidate{datapath: string(config.DatapathNFT), mode: string(config.ModeNAT), optOuts: uncounted},
	sluiceCandidate{datapath: string(config.DatapathNFT), mode: string(config.ModeFullNAT), optOuts: uncounted},
	sluiceCandidate{datapath: string(config.DatapathNFT), mode: string(config.ModeNAT), optOuts: lean},
	sluiceCandidate{datapath: string(config.DatapathNFT), mode: string(config.ModeFullNAT), optOuts: lean},
}, servedCandidates()...)

// selectCandidates returns the baselines, then every Sluice datapath in every mode, then the
// ebpf datapath at XDP in every mode, then the installed peers, filtered by names, then the
// candidates on request that are named; missing are the peers not installed.
func selectCandidates(names []string) (out []candidate, missing []string, err error) {
	all := slices.Clone(baselines)
	for _, dp := range config.Datapaths {
		for _, m := range config.Modes {
			if m == config.ModeTunnel && dp != config.DatapathEBPF {
				continue // only the ebpf datapath encapsulates
			}
			all = append(all, sluiceCandidate{datapath: string(dp), mode: string(m)})
		}
	}
	for _, m := range config.Modes {
		all = append(all, sluiceCandidate{datapath: string(config.DatapathEBPF), mode: string(m), attach: string(config.AttachXDP)})
	}
	for _, p := range Peers() {
		if p.available() {
			all = append(all, p)
		} else {
			missing = append(missing, p.Name())
		}
	}
	isBaseline := func(c candidate) bool {
		return slices.ContainsFunc(baselines, func(b candidate) bool { return b.Name() == c.Name() })
	}
	for _, c := range all {
		if len(names) == 0 || isBaseline(c) || slices.Contains(names, c.Name()) {
			out = append(out, c)
		}
	}
	for _, c := range onRequest {
		if slices.Contains(names, c.Name()) {
			out = append(out, c)
		}
	}
	all = append(all, onRequest...)
	for _, n := range names {
		switch {
		case slices.Contains(missing, n):
			return nil, nil, fmt.Errorf("--candidates: %s is not installed (try --install-peers)", n)
		case !slices.ContainsFunc(all, func(c candidate) bool { return c.Name() == n }):
			return nil, nil, fmt.Errorf("--candidates: unknown candidate %q", n)
		}
	}
	return out, missing, nil
}

// summarize turns the samples into cells: medians, and ratios to direct.
func summarize(o LBOptions, backends int, workloads []Workload, candidates []candidate, missing []string, samples map[[2]string][]LBSample) *LBResults {
	res := &LBResults{Duration: o.Duration.String(), Rounds: o.Rounds, Rate: o.Rate, Backends: backends, Switch: o.Switch.orStack(),
		Workloads: workloads, Missing: missing, Against: o.Against}
	for _, c := range candidates {
		res.Candidates = append(res.Candidates, c.Name())
	}
	for _, w := range workloads {
		first := len(res.Cells)
		for _, name := range res.Candidates {
			ss := samples[[2]string{name, w.Name}]
			m := medians(ss)
			cell := LBCell{Candidate: name, Workload: w.Name, Rounds: ss, RPS: m.RPS, P50US: m.P50US, P99US: m.P99US, Errors: m.Errors,
				Profile: medianProfile(ss), CPUNS: medianCPU(ss), Symbols: medianSymbols(ss)}
			for _, s := range ss {
				if s.CPU != nil && cell.CPU == nil {
					cpu := Median(pluck(ss, func(s LBSample) float64 { return *s.CPU }))
					cell.CPU = &cpu
				}
			}
			res.Cells = append(res.Cells, cell)
		}
		cells := res.Cells[first:]
		direct, _ := res.Cell(direct{}.Name(), w.Name)
		spread, _ := res.Cell(ecmp{}.Name(), w.Name)
		against, paired := res.Cell(o.Against, w.Name)
		for i := range cells {
			cells[i].Ratio = ratio(cells[i].RPS, direct.RPS)
			cells[i].RatioECMP = ratio(cells[i].RPS, spread.RPS)
			if paired && cells[i].Candidate != o.Against {
				cells[i].Paired = pairedRatio(o.Against, pluck(cells[i].Rounds, LBSample.rps), pluck(against.Rounds, LBSample.rps))
			}
		}
	}
	return res
}

// medians are the median requests/s, p50 and p99 of the samples, with their errors summed.
func medians(ss []LBSample) LBSample {
	m := LBSample{
		RPS:   Median(pluck(ss, func(s LBSample) float64 { return s.RPS })),
		P50US: Median(pluck(ss, func(s LBSample) float64 { return s.P50US })),
		P99US: Median(pluck(ss, func(s LBSample) float64 { return s.P99US })),
	}
	for _, s := range ss {
		m.Errors += s.Errors
	}
	return m
}

// portRanges hands out client port ranges: connection-per-request workloads rotate through
// wide disjoint ranges, so a phase never reuses a 4-tuple that a backend (or conntrack) still
// holds in TIME_WAIT from another candidate's phase, where it would be bound to other NAT;
// keep-alive workloads need few ports and share one range.
type portRanges struct{ n int }

const (
	perConnLow, perConnHigh, perConnSlots = 10000, 60999, 8
	keepAliveLow, keepAliveHigh           = 61000, 65000
)

func (p *portRanges) next(perConn bool) (low, high int) {
	if !perConn {
		return keepAliveLow, keepAliveHigh
	}
	width := (perConnHigh - perConnLow + 1) / perConnSlots
	low = perConnLow + (p.n%perConnSlots)*width
	p.n++
	return low, low + width - 1
}
