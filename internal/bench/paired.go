package bench

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
)

// PairedRatio is a candidate's figure (requests/s, forwarded packets/s per core) over another
// candidate's, round by round: within a round the two ran seconds apart, so each round's ratio
// cancels the drift of the machine that the ratio of the two medians keeps.
type PairedRatio struct {
	Against string `json:"against"`
	// Rounds are the rounds' ratios, in round order.
	Rounds []float64 `json:"rounds"`
	Median float64   `json:"median"`
	// Low and High bound the true median of the ratio with probability Confidence (the sign
	// test's order statistics, no assumption on the distribution); absent below 6 rounds,
	// where no interval reaches 95%.
	Low        *float64 `json:"low,omitempty"`
	High       *float64 `json:"high,omitempty"`
	Confidence float64  `json:"confidence,omitempty"`
}

// minConfidence is the least confidence a median's interval is given with.
const minConfidence = 0.95

// checkAgainst refuses an --against that names no candidate of the run.
func checkAgainst[C interface{ Name() string }](against string, candidates []C) error {
	if against != "" && !slices.ContainsFunc(candidates, func(c C) bool { return c.Name() == against }) {
		return fmt.Errorf("--against: %q is not among the candidates measured (name it in --candidates)", against)
	}
	return nil
}

// pairedRatio is values over base round by round, base being the figures of the candidate
// against; nil when the two have different rounds or base has a round of zero.
func pairedRatio(against string, values, base []float64) *PairedRatio {
	if len(values) == 0 || len(values) != len(base) {
		return nil
	}
	p := &PairedRatio{Against: against}
	for i, v := range values {
		if base[i] <= 0 {
			return nil
		}
		p.Rounds = append(p.Rounds, v/base[i])
	}
	p.Median = Median(p.Rounds)
	if low, high, confidence, ok := medianInterval(p.Rounds); ok {
		p.Low, p.High, p.Confidence = &low, &high, confidence
	}
	return p
}

// medianInterval is the narrowest interval of order statistics [x(k), x(n+1-k)] that holds the
// median of the distribution xs were drawn from with at least minConfidence: the median lies
// below x(k) only if fewer than k of n draws fall below it, Binomial(n, 1/2) < k.
func medianInterval(xs []float64) (low, high, confidence float64, ok bool) {
	n := len(xs)
	sorted := slices.Sorted(slices.Values(xs))
	for k := n / 2; k >= 1; k-- {
		if c := 1 - 2*binomialHalfCDF(n, k-1); c >= minConfidence {
			return sorted[k-1], sorted[n-k], c, true
		}
	}
	return 0, 0, 0, false
}

// binomialHalfCDF is P(X <= k) for X ~ Binomial(n, 1/2), summed in logarithms so that no
// term underflows for large n.
func binomialHalfCDF(n, k int) float64 {
	var p float64
	for i := 0; i <= k; i++ {
		p += math.Exp(logChoose(n, i) - float64(n)*math.Ln2)
	}
	return min(p, 1)
}

// logChoose is ln(n choose k).
func logChoose(n, k int) float64 {
	a, _ := math.Lgamma(float64(n + 1))
	b, _ := math.Lgamma(float64(k + 1))
	c, _ := math.Lgamma(float64(n - k + 1))
	return a - b - c
}

// pairedRow is one line of a table of paired ratios.
type pairedRow struct {
	workload, candidate string
	paired              *PairedRatio
}

// writePairedTable renders the per-round ratios to the --against candidate of the rows that have
// them; measure names the figure the ratios are of. Nothing without --against.
func writePairedTable(b *strings.Builder, against, measure string, rows []pairedRow) {
	if against == "" {
		return
	}
	fmt.Fprintf(b, "\nper-round ratios to %s (each round's %s over %s's in the same round):\n\n", against, measure, against)
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "WORKLOAD\tCANDIDATE\tMEDIAN\tLOW\tHIGH\tCONFIDENCE\tROUNDS\t")
	last := ""
	for _, r := range rows {
		p := r.paired
		if p == nil {
			continue
		}
		label := r.workload
		if label == last {
			label = ""
		}
		last = r.workload
		low, high, confidence := "-", "-", "-"
		if p.Low != nil {
			low, high, confidence = percent(*p.Low), percent(*p.High), percent(p.Confidence)
		}
		rounds := make([]string, len(p.Rounds))
		for i, x := range p.Rounds {
			rounds[i] = fmt.Sprintf("%.0f", 100*x)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", label, r.candidate, percent(p.Median), low, high, confidence, strings.Join(rounds, " "))
	}
	_ = tw.Flush()
	b.WriteString("LOW-HIGH: the range that holds the true median of the ratio with CONFIDENCE (sign test; needs 6 rounds or more).\n")
}

// percent formats a ratio as a percentage with one decimal: 0.9712 is 97.1%.
func percent(x float64) string { return fmt.Sprintf("%.1f%%", 100*x) }
