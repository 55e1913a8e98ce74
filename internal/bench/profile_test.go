package bench

import (
	"math"
	"strings"
	"testing"
)

// perfReport is what `perf report --stdio -q -n --sort sym` prints, trimmed.
const perfReport = `
    20.00%          2000  [k] nft_do_chain
    10.00%          1000  [k] nft_lookup_eval
     5.00%           500  [k] nft_jhash_eval
     3.00%           300  [k] nft_counter_eval
     2.00%           200  [k] nft_ct_set_eval
     1.00%           100  [k] nft_nat_do_chain
     1.00%           100  [k] nf_nat_setup_info
     4.00%           400  [k] nf_conntrack_in
     1.00%           100  [k] nf_ct_timeout_find_get
    30.00%          3000  [k] tcp_v4_rcv
     9.00%           900  [.] wrk_main
     0.01%             1  [k] nft_dynset_eval
     1.00%           100  [k] bpf_prog_6deef7357e7b4530_sluice_decap
     2.00%           200  [k] bpf_prog_0123456789abcdef_sluice_tc
`

func TestProfileChargesKernelSymbolsToFeatures(t *testing.T) {
	samples, err := parsePerfReport(perfReport)
	if err != nil {
		t.Fatal(err)
	}
	if _, user := samples["wrk_main"]; user {
		t.Error("a user-space symbol was read as the kernel's")
	}
	// As many requests as a sample holds ns: ns per request is then the samples.
	p := profileOf(samples, 1e9/profileHz)
	want := Profile{FeatureRules: 2100, FeatureMaps: 1000, FeatureHash: 500, FeatureCounters: 300, FeatureCTSet: 300,
		FeatureNAT: 100, FeatureConntrack: 400, FeatureDynset: 1, FeatureDecap: 100, FeatureBPF: 200}
	for f, ns := range want {
		if math.Abs(p[f]-ns) > 1e-6 {
			t.Errorf("%s: %.3f ns per request, want %.0f", f, p[f], ns)
		}
	}
	if len(p) != len(want) {
		t.Errorf("profile %v charges features beyond %v (tcp_v4_rcv is the rest of the stack)", p, want)
	}
}

func TestProfileTableShowsMediansPerFeature(t *testing.T) {
	ss := []LBSample{{Profile: Profile{FeatureMaps: 10, FeatureHash: 3}}, {Profile: Profile{FeatureMaps: 30}}, {Profile: Profile{FeatureMaps: 20, FeatureHash: 5}}}
	m := medianProfile(ss)
	if m[FeatureMaps] != 20 || m[FeatureHash] != 3 {
		t.Fatalf("medians %v, want maps 20 and hash 3 (0, 3, 5)", m)
	}
	r := &LBResults{Workloads: []Workload{{Name: "per-conn"}}, Candidates: []string{"nft-nat"},
		Cells: []LBCell{{Candidate: "nft-nat", Workload: "per-conn", Profile: m}}}
	table := r.profileTable()
	if !strings.Contains(table, "MAPS") || !strings.Contains(table, "HASH") || strings.Contains(table, "NAT  ") {
		t.Errorf("table:\n%s", table)
	}
	if (&LBResults{}).profileTable() != "" {
		t.Error("results without profiles print a profile table")
	}
}
