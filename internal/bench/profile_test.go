package bench

import (
	"math"
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
