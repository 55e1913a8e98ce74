package bench

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestMedianIntervalOrderStatistics(t *testing.T) {
	for _, tc := range []struct {
		n, k       int // the interval is [x(k), x(n+1-k)], 1-based
		confidence float64
	}{
		{6, 1, 1 - 2.0/64},
		{9, 2, 1 - 2*10.0/512},
		{31, 10, 0.97055},
	} {
		xs := make([]float64, tc.n)
		for i := range xs {
			xs[len(xs)-1-i] = float64(i + 1) // descending: the interval must sort them
		}
		low, high, confidence, ok := medianInterval(xs)
		if !ok || low != float64(tc.k) || high != float64(tc.n+1-tc.k) || math.Abs(confidence-tc.confidence) > 1e-4 {
			t.Errorf("n=%d: [%v, %v] with %v (%v), want [%d, %d] with %.5f", tc.n, low, high, confidence, ok, tc.k, tc.n+1-tc.k, tc.confidence)
		}
	}
	if _, _, _, ok := medianInterval([]float64{1, 2, 3, 4, 5}); ok {
		t.Error("5 rounds gave an interval: none reaches 95% (the widest is 93.75%)")
	}
	if c := binomialHalfCDF(2000, 2000); math.Abs(c-1) > 1e-9 {
		t.Errorf("P(X <= n) for n=2000 is %v, want 1 (no underflow)", c)
	}
}

func TestPairedRatioRoundByRound(t *testing.T) {
	base := []float64{100, 200, 100, 200, 100, 200}
	// the medians' ratio is 1.5/1.5 = 1; every round says 0.9
	p := pairedRatio("nft-dnat", []float64{90, 180, 90, 180, 90, 180}, base)
	if p == nil || p.Against != "nft-dnat" || math.Abs(p.Median-0.9) > 1e-9 || p.Low == nil || math.Abs(*p.Low-0.9) > 1e-9 || len(p.Rounds) != 6 {
		t.Fatalf("paired ratio %+v, want every round 0.9 with an interval", p)
	}
	if p := pairedRatio("nft-dnat", []float64{1, 2}, base); p != nil {
		t.Errorf("rounds of different counts paired: %+v", p)
	}
	if p := pairedRatio("nft-dnat", []float64{1}, []float64{0}); p != nil {
		t.Errorf("a round of zero as the denominator paired: %+v", p)
	}
}

func TestSummarizeAgainst(t *testing.T) {
	o := LBOptions{Duration: time.Second, Rounds: 3, Rate: 1000, Against: "direct"}
	ws, _ := selectWorkloads([]string{"keepalive"})
	cands := []candidate{direct{}, ecmp{}}
	samples := map[[2]string][]LBSample{
		{"direct", "keepalive"}: {{RPS: 100}, {RPS: 300}, {RPS: 200}},
		{"ecmp", "keepalive"}:   {{RPS: 50}, {RPS: 330}, {RPS: 100}},
	}
	r := summarize(o, 3, ws, cands, nil, samples)
	d, _ := r.Cell("direct", "keepalive")
	e, _ := r.Cell("ecmp", "keepalive")
	if d.Paired != nil || e.Paired == nil || math.Abs(e.Paired.Median-0.5) > 1e-9 || e.Paired.Low != nil {
		t.Fatalf("direct %+v, ecmp %+v: want ecmp's rounds 50%%, 110%%, 50%% over direct, median 50%%, no interval in 3 rounds", d.Paired, e.Paired)
	}
	table := r.Table()
	for _, want := range []string{"per-round ratios to direct", "50.0%", "50 110 50"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if strings.Contains(sampleResults().Table(), "per-round ratios") {
		t.Error("a run without --against shows per-round ratios")
	}
}
