package bench

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// `bench lb --profile` samples every CPU with perf while each load runs and charges the kernel
// functions of the packet path to what they do: which rules' work a request costs, in ns per
// request (samples x sampling period / requests). CPU time, not wall time: another process on the
// machine takes cores from the run but adds no samples to these functions, unless it too runs
// nftables or conntrack traffic.

// profileHz is perf's sampling frequency per CPU: a sample is 1/profileHz s of CPU time.
const profileHz = 4999

// Feature is a part of the kernel's packet path that profiles are summed into.
type Feature string

// The features, in the order a report shows them.
const (
	FeatureRules     Feature = "rules"     // walking the chains: nft_do_chain, compares, immediates, payload and meta loads
	FeatureMaps      Feature = "maps"      // lookups in sets and maps: dispatch, slots, members, verdict maps
	FeatureHash      Feature = "hash"      // jhash and symhash selectors
	FeatureCounters  Feature = "counters"  // counter rules and named counters
	FeatureCTSet     Feature = "ct-set"    // ct timeout/event/mark set, ct state and mark reads
	FeatureDynset    Feature = "dynset"    // set updates from the packet path: flow, persistence and limit maps
	FeatureNAT       Feature = "nat"       // address translation, masquerade included
	FeatureConntrack Feature = "conntrack" // connection tracking itself
	FeatureIPTables  Feature = "iptables"  // the xtables path (iptables candidates)
	FeatureBPF       Feature = "bpf"       // BPF programs, helpers and their maps' lookups (the ebpf datapath)
	FeatureDecap     Feature = "decap"     // sluice decap's program on the backends (tunnel)
	FeatureSync      Feature = "sync"      // replication: conntrackd, the sluice daemon, ctnetlink's events
)

// Features are every Feature, in report order.
var Features = []Feature{FeatureRules, FeatureMaps, FeatureHash, FeatureCounters, FeatureCTSet, FeatureDynset, FeatureNAT, FeatureConntrack, FeatureIPTables, FeatureBPF, FeatureDecap, FeatureSync}

// syncProcesses are the processes whose CPU, besides the packet path's functions, is charged to
// FeatureSync: the replication daemons (the sluice daemon also checks health, a small share).
var syncProcesses = map[string]bool{"conntrackd": true, "sluice": true}

// uncharged are the processes whose samples are not the load's: the idle task and perf itself.
var uncharged = map[string]bool{"swapper": true, "perf": true}

// featureOf charges kernel symbols to features by their names: the first pattern that matches.
var featureOf = []struct {
	pattern *regexp.Regexp
	feature Feature
}{
	{regexp.MustCompile(`^nft_nat_do_chain$`), FeatureRules}, // the nat chains' walk, not a translation
	{regexp.MustCompile(`^(nft_jhash|nft_symhash|jhash)`), FeatureHash},
	{regexp.MustCompile(`^(nft_counter|nft_objref_eval|nft_objref_map)`), FeatureCounters},
	{regexp.MustCompile(`^(nft_dynset|nft_rhash_update|nft_hash_update|nft_rhash_gc|nft_set_elem_expr|nft_limit|nft_connlimit)`), FeatureDynset},
	{regexp.MustCompile(`^(nft_lookup|nft_hash_lookup|nft_rhash_lookup|nft_pipapo|nft_rbtree|__nft_rbtree|nft_bitmap|nft_set_do_lookup|nft_hash_key|nft_vmap|nft_set_lookup)`), FeatureMaps},
	{regexp.MustCompile(`^(nft_ct_|nf_ct_timeout|nf_ct_ecache|nf_conntrack_event|nf_ct_deliver_cached_events)`), FeatureCTSet},
	{regexp.MustCompile(`^(nft_nat|nft_masq|nft_fwd|nf_nat|__nf_nat|nf_masquerade|nf_xfrm_me_harder|l4proto_manip_pkt|nf_nat_ipv[46])`), FeatureNAT},
	{regexp.MustCompile(`^(nf_conntrack|__nf_conntrack|nf_ct_|__nf_ct|nf_confirm|ipv[46]_conntrack|nf_conntrack_tcp|tcp_in_window|nf_tcp|nf_udp|hash_conntrack|init_conntrack|resolve_normal_ct)`), FeatureConntrack},
	{regexp.MustCompile(`^(ipt_do_table|ip6t_do_table|xt_|statistic_mt|ebt_do_table)`), FeatureIPTables},
	{regexp.MustCompile(`^bpf_prog_[0-9a-f]+_sluice_decap$`), FeatureDecap},
	{regexp.MustCompile(`^(bpf_prog_|bpf_|tcf_bpf|cls_bpf)`), FeatureBPF},
	// the maps' own lookup functions, which programs call through helpers or inlined code:
	// hash tables (and their LRU and per-CPU kinds), LPM tries, arrays
	{regexp.MustCompile(`^(htab_|__htab_|lookup_nulls_elem_raw|lookup_elem_raw|prealloc_lru_pop|trie_|array_map_|percpu_array_)`), FeatureBPF},
	{regexp.MustCompile(`^ctnetlink_`), FeatureSync}, // conntrack's events to conntrackd
	{regexp.MustCompile(`^(nft_do_chain|nft_immediate|nft_cmp|nft_payload|nft_meta|nft_bitwise|nft_range|nft_byteorder|nft_trace|nft_exthdr|nft_rt|nft_fib|nf_hook_slow|nft_nat_do_chain|__nft_)`), FeatureRules},
}

// chargeSymbol is the feature a kernel symbol is charged to; "" for none (the rest of the stack).
func chargeSymbol(symbol string) Feature {
	for _, f := range featureOf {
		if f.pattern.MatchString(symbol) {
			return f.feature
		}
	}
	return ""
}

// Profile is where a load run's packet-path CPU time went: ns per request by feature.
type Profile map[Feature]float64

// Total is the ns per request of every feature.
func (p Profile) Total() float64 {
	var t float64
	for _, ns := range p {
		t += ns
	}
	return t
}

// perfSamples are a perf report's samples: by kernel symbol outside the replication daemons, by
// symbol of those daemons, and of every process but the idle task and perf (CPU time, every
// process, user and kernel).
type perfSamples struct {
	kernel, daemons map[string]int64
	all             int64
}

// profiler samples every CPU with perf while a load runs.
type profiler struct {
	cmd  *exec.Cmd
	data string
}

// perfPath finds perf (Debian: linux-perf).
func perfPath() (string, error) { return exec.LookPath("perf") }

// startProfile starts perf sampling every CPU into a file under dir.
func startProfile(ctx context.Context, dir string) (*profiler, error) {
	perf, err := perfPath()
	if err != nil {
		return nil, fmt.Errorf("perf not found (Debian package linux-perf): %w", err)
	}
	p := &profiler{data: filepath.Join(dir, fmt.Sprintf("perf-%d.data", time.Now().UnixNano()))}
	p.cmd = exec.CommandContext(ctx, perf, "record", "-q", "-e", "cpu-clock", "-F", strconv.Itoa(profileHz), "-a", "-o", p.data)
	p.cmd.Cancel = func() error { return p.cmd.Process.Signal(syscall.SIGINT) }
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("perf record: %w", err)
	}
	return p, nil
}

// runProfile is what one profiled load run's samples say, per request.
type runProfile struct {
	features Profile
	cpu      float64 // the machine's CPU time, every process (ns)
	symbols  []SymbolCost
}

// stop ends the sampling and charges the samples, per request of requests.
func (p *profiler) stop(ctx context.Context, requests float64) (runProfile, error) {
	defer os.Remove(p.data)
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		return runProfile{}, err
	}
	if err := p.cmd.Wait(); err != nil && !isInterrupted(err) {
		return runProfile{}, fmt.Errorf("perf record: %w", err)
	}
	perf, err := perfPath()
	if err != nil {
		return runProfile{}, err
	}
	out, err := exec.CommandContext(ctx, perf, "report", "-i", p.data, "--stdio", "-q", "-n", "--sort", "comm,sym", "--percent-limit", "0").Output()
	if err != nil {
		return runProfile{}, fmt.Errorf("perf report: %w", err)
	}
	samples, err := parsePerfReport(string(out))
	if err != nil {
		return runProfile{}, err
	}
	return runProfile{
		features: profileOf(samples, requests),
		cpu:      perRequest(samples.all, requests),
		symbols:  kept(symbolsOf(samples, requests), roundSymbols),
	}, nil
}

// isInterrupted tells whether perf ended on the SIGINT that stops it.
func isInterrupted(err error) bool {
	var exit *exec.ExitError
	return errors.As(err, &exit) && (exit.ExitCode() == 130 || exit.ExitCode() == -1)
}

// perfLine is a line of `perf report --stdio -q -n --sort comm,sym`:
// "  12.34%   1234  nginx  [k] nft_do_chain".
var perfLine = regexp.MustCompile(`^\s*[0-9.]+%\s+([0-9]+)\s+(.+?)\s+\[([k.])\]\s+(\S+)`)

// parsePerfReport reads the samples of a perf report.
func parsePerfReport(report string) (perfSamples, error) {
	s := perfSamples{kernel: map[string]int64{}, daemons: map[string]int64{}}
	scanner := bufio.NewScanner(strings.NewReader(report))
	for scanner.Scan() {
		m := perfLine.FindStringSubmatch(scanner.Text())
		if len(m) != 5 || uncharged[m[2]] {
			continue
		}
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil {
			return perfSamples{}, fmt.Errorf("perf report: %q: %w", scanner.Text(), err)
		}
		s.all += n
		switch {
		case syncProcesses[m[2]]:
			s.daemons[m[4]] += n
		case m[3] == "k":
			s.kernel[m[4]] += n
		}
	}
	return s, scanner.Err()
}

// profileOf charges samples to features, in ns per request of requests: kernel symbols by their
// names, and the replication daemons' other samples to FeatureSync.
func profileOf(samples perfSamples, requests float64) Profile {
	p := Profile{}
	if requests <= 0 {
		return p
	}
	for symbol, n := range samples.kernel {
		if f := chargeSymbol(symbol); f != "" {
			p[f] += perRequest(n, requests)
		}
	}
	for symbol, n := range samples.daemons {
		f := chargeSymbol(symbol)
		if f == "" {
			f = FeatureSync
		}
		p[f] += perRequest(n, requests)
	}
	return p
}

// SymbolCost is one symbol's CPU time per request in profiled runs, and the feature it is charged
// to: the evidence behind a profile's features.
type SymbolCost struct {
	Symbol string `json:"symbol"`
	// Daemon marks a replication daemon's own samples (user or kernel), charged to sync unless
	// the symbol is the packet path's; the others are kernel symbols of every other process.
	Daemon bool `json:"daemon,omitempty"`
	// Feature is "" for the rest of the stack (TCP, routing, the veths, scheduling).
	Feature Feature `json:"feature,omitempty"`
	NS      float64 `json:"ns_per_request"`
}

// The symbols of the rest (not charged to a feature by name) that a report keeps beside the charged
// ones: a round keeps more than a cell lists, so that a symbol near the cut in one round is not
// taken as 0 there.
const (
	roundSymbols = 80
	cellSymbols  = 40
)

// symbolsOf is every kernel and daemon symbol of samples with the feature it is charged to, in ns
// per request of requests.
func symbolsOf(samples perfSamples, requests float64) []SymbolCost {
	if requests <= 0 {
		return nil
	}
	out := make([]SymbolCost, 0, len(samples.kernel)+len(samples.daemons))
	for symbol, n := range samples.kernel {
		out = append(out, SymbolCost{Symbol: symbol, Feature: chargeSymbol(symbol), NS: perRequest(n, requests)})
	}
	for symbol, n := range samples.daemons {
		f := chargeSymbol(symbol)
		if f == "" {
			f = FeatureSync
		}
		out = append(out, SymbolCost{Symbol: symbol, Daemon: true, Feature: f, NS: perRequest(n, requests)})
	}
	return out
}

// kept are the symbols a report keeps, costliest first (ties by name, the kernel's before a
// daemon's, so that a report reads the same each time): every symbol charged to a feature by its
// name, and the n costliest of the others (the rest of the stack, the daemons' own code).
func kept(symbols []SymbolCost, n int) []SymbolCost {
	slices.SortFunc(symbols, func(a, b SymbolCost) int {
		if c := cmp.Compare(b.NS, a.NS); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Symbol, b.Symbol); c != 0 {
			return c
		}
		switch {
		case a.Daemon == b.Daemon:
			return 0
		case a.Daemon:
			return 1
		}
		return -1
	})
	var out []SymbolCost
	others := 0
	for _, c := range symbols {
		if chargeSymbol(c.Symbol) == "" {
			if others == n {
				continue
			}
			others++
		}
		out = append(out, c)
	}
	return out
}

// medianSymbols is, symbol by symbol, the median of the profiled samples' costs (a round that did
// not keep a symbol counts it as 0), those a cell keeps; nil when none was profiled.
func medianSymbols(ss []LBSample) []SymbolCost {
	type key struct {
		symbol string
		daemon bool
	}
	var profiled []LBSample
	for _, s := range ss {
		if s.Profile != nil {
			profiled = append(profiled, s)
		}
	}
	if len(profiled) == 0 {
		return nil
	}
	values := map[key][]float64{}
	charged := map[key]Feature{}
	for i, s := range profiled {
		for _, c := range s.Symbols {
			k := key{c.Symbol, c.Daemon}
			if values[k] == nil {
				values[k] = make([]float64, len(profiled))
			}
			values[k][i] = c.NS
			charged[k] = c.Feature
		}
	}
	out := make([]SymbolCost, 0, len(values))
	for k, v := range values {
		if m := Median(v); m > 0 {
			out = append(out, SymbolCost{Symbol: k.symbol, Daemon: k.daemon, Feature: charged[k], NS: m})
		}
	}
	return kept(out, cellSymbols)
}

// perRequest is n samples' CPU time in ns per request of requests; 0 without requests.
func perRequest(n int64, requests float64) float64 {
	if requests <= 0 {
		return 0
	}
	return float64(n) * 1e9 / profileHz / requests
}

// medianCPU is the median of the samples' CPU per request, those profiled; 0 for none.
func medianCPU(ss []LBSample) float64 {
	var values []float64
	for _, s := range ss {
		if s.CPUNS > 0 {
			values = append(values, s.CPUNS)
		}
	}
	if len(values) == 0 {
		return 0
	}
	return Median(values)
}

// medianProfile is, feature by feature, the median of the samples' profiles; nil when none was
// profiled.
func medianProfile(ss []LBSample) Profile {
	var out Profile
	for _, f := range Features {
		var values []float64
		for _, s := range ss {
			if s.Profile != nil {
				values = append(values, s.Profile[f])
			}
		}
		if len(values) == 0 {
			continue
		}
		if out == nil {
			out = Profile{}
		}
		if m := Median(values); m > 0 {
			out[f] = m
		}
	}
	return out
}

// profileTable renders the cells' profiles: a row per workload and candidate, ns per request by
// feature, the features no cell has left out.
func (r *LBResults) profileTable() string {
	var used []Feature
	for _, f := range Features {
		for _, c := range r.Cells {
			if c.Profile[f] >= 0.5 {
				used = append(used, f)
				break
			}
		}
	}
	if len(used) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nwhere the packet path's kernel time went, ns per request (perf, every CPU, medians):\n\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := "WORKLOAD\tCANDIDATE\t"
	for _, f := range used {
		header += strings.ToUpper(string(f)) + "\t"
	}
	fmt.Fprintln(tw, header+"SUM\tCPU\tCPU RATIO\t")
	for _, w := range r.Workloads {
		base := 0.0
		for i, name := range r.Candidates {
			c, _ := r.Cell(name, w.Name)
			if c.Profile == nil {
				continue
			}
			if base == 0 {
				base = c.CPUNS
			}
			label := ""
			if i == 0 {
				label = w.Name
			}
			row := label + "\t" + name + "\t"
			for _, f := range used {
				row += fmt.Sprintf("%.0f\t", c.Profile[f])
			}
			ratio := "-"
			if c.CPUNS > 0 && base > 0 {
				ratio = fmt.Sprintf("%.3f", base/c.CPUNS)
			}
			fmt.Fprintln(tw, row+fmt.Sprintf("%.0f\t%.0f\t%s\t", c.Profile.Total(), c.CPUNS, ratio))
		}
	}
	tw.Flush()
	fmt.Fprintf(&b, "rules: chain walks, compares, loads; maps: set and map lookups; hash: jhash selectors; counters; ct-set: ct timeout/event/mark set and ct reads;\n")
	fmt.Fprintf(&b, "dynset: set updates from the packet path; nat; conntrack; iptables: xtables; bpf: BPF programs, helpers, map lookups; decap: sluice decap's program on\n")
	fmt.Fprintf(&b, "the backends; sync: conntrackd, the sluice daemon and ctnetlink's events. The rest of the stack is not charged.\n")
	fmt.Fprintf(&b, "CPU: the whole machine's CPU time per request (every process, user and kernel; not idle, not perf); CPU RATIO: the workload's\n")
	fmt.Fprintf(&b, "first candidate's CPU over this one's, the throughput ratio that cost alone gives when the machine is saturated.\n")
	return b.String()
}
