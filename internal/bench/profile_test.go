package bench

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// perfReport is what `perf report --stdio -q -n --sort comm,sym` prints, trimmed.
const perfReport = `
    20.00%          2000  ksoftirqd/0      [k] nft_do_chain
    10.00%          1000  nginx            [k] nft_lookup_eval
     5.00%           500  wrk              [k] nft_jhash_eval
     3.00%           300  nginx            [k] nft_counter_eval
     2.00%           200  nginx            [k] nft_ct_set_eval
     1.00%           100  nginx            [k] nft_nat_do_chain
     1.00%           100  nginx            [k] nf_nat_setup_info
     4.00%           400  nginx            [k] nf_conntrack_in
     1.00%           100  nginx            [k] nf_ct_timeout_find_get
    30.00%          3000  nginx            [k] tcp_v4_rcv
     9.00%           900  wrk              [.] wrk_main
     0.01%             1  nginx            [k] nft_dynset_eval
     1.00%           100  nginx            [k] bpf_prog_6deef7357e7b4530_sluice_decap
     2.00%           200  nginx            [k] bpf_prog_0123456789abcdef_sluice_tc
     0.30%            30  nginx            [k] trie_lookup_elem
     0.20%            20  wrk              [k] lookup_nulls_elem_raw
     0.10%            10  wrk              [k] htab_map_hash
     0.50%            50  nginx            [k] ctnetlink_conntrack_event
     0.70%            70  conntrackd       [.] 0x000000000001a2b3
     0.20%            20  conntrackd       [k] netlink_recvmsg
     0.10%            10  conntrackd       [k] nft_do_chain
    40.00%          4000  swapper          [k] default_idle
     1.00%           100  perf             [k] perf_event_output
`

func TestProfileChargesKernelSymbolsToFeatures(t *testing.T) {
	samples, err := parsePerfReport(perfReport)
	if err != nil {
		t.Fatal(err)
	}
	if _, user := samples.kernel["wrk_main"]; user {
		t.Error("a user-space symbol was read as the kernel's")
	}
	// As many requests as a sample holds ns: ns per request is then the samples.
	requests := 1e9 / profileHz
	p := profileOf(samples, requests)
	want := Profile{FeatureRules: 2110, FeatureMaps: 1000, FeatureHash: 500, FeatureCounters: 300, FeatureCTSet: 300,
		FeatureNAT: 100, FeatureConntrack: 400, FeatureDynset: 1, FeatureDecap: 100, FeatureBPF: 260, FeatureSync: 140}
	for f, ns := range want {
		if math.Abs(p[f]-ns) > 1e-6 {
			t.Errorf("%s: %.3f ns per request, want %.0f", f, p[f], ns)
		}
	}
	if len(p) != len(want) {
		t.Errorf("profile %v charges features beyond %v (tcp_v4_rcv is the rest of the stack)", p, want)
	}
	// Every process's samples but the idle task's and perf's.
	if cpu := perRequest(samples.all, requests); math.Abs(cpu-9111) > 1e-6 {
		t.Errorf("CPU %.3f ns per request, want 9111 (idle and perf left out)", cpu)
	}
}

func TestProfileTableShowsMediansPerFeature(t *testing.T) {
	ss := []LBSample{{Profile: Profile{FeatureMaps: 10, FeatureHash: 3}}, {Profile: Profile{FeatureMaps: 30}}, {Profile: Profile{FeatureMaps: 20, FeatureHash: 5}}}
	m := medianProfile(ss)
	if m[FeatureMaps] != 20 || m[FeatureHash] != 3 {
		t.Fatalf("medians %v, want maps 20 and hash 3 (0, 3, 5)", m)
	}
	if cpu := medianCPU([]LBSample{{CPUNS: 9000}, {}, {CPUNS: 11000}, {CPUNS: 10000}}); cpu != 10000 {
		t.Fatalf("median CPU %v, want 10000 (the run without a profile left out)", cpu)
	}
	r := &LBResults{Workloads: []Workload{{Name: "per-conn"}}, Candidates: []string{"nft-dnat", "nft-nat"},
		Cells: []LBCell{{Candidate: "nft-dnat", Workload: "per-conn", Profile: m, CPUNS: 9000}, {Candidate: "nft-nat", Workload: "per-conn", Profile: m, CPUNS: 10000}}}
	table := r.profileTable()
	if !strings.Contains(table, "MAPS") || !strings.Contains(table, "HASH") || strings.Contains(table, "NAT  ") {
		t.Errorf("table:\n%s", table)
	}
	if !strings.Contains(table, "1.000") || !strings.Contains(table, "0.900") {
		t.Errorf("table without the CPU ratios 1.000 (the first candidate) and 0.900:\n%s", table)
	}
	if (&LBResults{}).profileTable() != "" {
		t.Error("results without profiles print a profile table")
	}
}

// TestProfileSymbolsShowWhatFeaturesAreMadeOf: every symbol of a run keeps the feature it is
// charged to (the rest of the stack none, a daemon's own code sync), costliest first, and a cell
// lists the medians over its rounds, a round that did not keep a symbol counting it as 0.
func TestProfileSymbolsShowWhatFeaturesAreMadeOf(t *testing.T) {
	samples, err := parsePerfReport(perfReport)
	if err != nil {
		t.Fatal(err)
	}
	symbols := kept(symbolsOf(samples, 1e9/profileHz), 1)
	want := []SymbolCost{{Symbol: "tcp_v4_rcv", NS: 3000}, {Symbol: "nft_do_chain", Feature: FeatureRules, NS: 2000},
		{Symbol: "nft_lookup_eval", Feature: FeatureMaps, NS: 1000}, {Symbol: "nft_jhash_eval", Feature: FeatureHash, NS: 500}}
	if len(symbols) < len(want) || !slices.EqualFunc(symbols[:len(want)], want, sameCost) {
		t.Errorf("costliest first:\n got %+v\nwant %+v first", symbols, want)
	}
	// Every charged symbol, the smallest too, and of the rest only the costliest (tcp_v4_rcv).
	for _, c := range symbols[1:] {
		if chargeSymbol(c.Symbol) == "" {
			t.Errorf("%+v kept beside tcp_v4_rcv, the one costliest uncharged", c)
		}
	}
	if !slices.ContainsFunc(symbols, func(c SymbolCost) bool { return c.Symbol == "nft_dynset_eval" }) {
		t.Errorf("nft_dynset_eval (1 sample, charged to dynset) left out: %+v", symbols)
	}
	all := symbolsOf(samples, 1e9/profileHz)
	if i := slices.IndexFunc(all, func(c SymbolCost) bool { return c.Daemon && c.Symbol == "nft_do_chain" }); i < 0 || !sameCost(all[i], SymbolCost{Symbol: "nft_do_chain", Daemon: true, Feature: FeatureRules, NS: 10}) {
		t.Errorf("conntrackd's nft_do_chain: %+v, want a daemon's, charged to rules, 10 ns", all)
	}
	if i := slices.IndexFunc(all, func(c SymbolCost) bool { return c.Symbol == "0x000000000001a2b3" }); i < 0 || !all[i].Daemon || all[i].Feature != FeatureSync {
		t.Errorf("conntrackd's own code not charged to sync: %+v", all)
	}
	if slices.ContainsFunc(all, func(c SymbolCost) bool { return c.Symbol == "wrk_main" || c.Symbol == "default_idle" }) {
		t.Errorf("user space of the load or the idle task listed: %+v", all)
	}

	round := func(chain, lookup float64) LBSample {
		s := LBSample{Profile: Profile{FeatureRules: chain}, Symbols: []SymbolCost{{Symbol: "nft_do_chain", Feature: FeatureRules, NS: chain}}}
		if lookup > 0 {
			s.Symbols = append(s.Symbols, SymbolCost{Symbol: "nft_lookup_eval", Feature: FeatureMaps, NS: lookup})
		}
		return s
	}
	cell := medianSymbols([]LBSample{round(100, 50), round(300, 0), round(200, 70), {RPS: 1}})
	want = []SymbolCost{{Symbol: "nft_do_chain", Feature: FeatureRules, NS: 200}, {Symbol: "nft_lookup_eval", Feature: FeatureMaps, NS: 50}}
	if !slices.EqualFunc(cell, want, sameCost) {
		t.Errorf("cell's medians (the unprofiled run left out, the missing lookup 0):\n got %+v\nwant %+v", cell, want)
	}
	if medianSymbols([]LBSample{{RPS: 1}}) != nil {
		t.Error("symbols for a cell never profiled")
	}
}

// sameCost compares symbol costs to a ns per request's rounding.
func sameCost(a, b SymbolCost) bool {
	return a.Symbol == b.Symbol && a.Daemon == b.Daemon && a.Feature == b.Feature && math.Abs(a.NS-b.NS) < 1e-6
}
