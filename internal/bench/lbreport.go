package bench

import (
	"fmt"
	"html"
	"strings"
	"text/tabwriter"
	"time"
)

// Table renders the results for people: one block per workload, one row per candidate.
func (r *LBResults) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sluice-lab bench lb: %d backends, %d round(s) of %s per candidate and workload, medians, switch %s\n\n", r.Backends, r.Rounds, r.Duration, r.Switch)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "WORKLOAD\tCANDIDATE\tREQ/S\tVS DIRECT\tVS ECMP\tP50\tP99\tLB CPU\tERRORS\t")
	for _, w := range r.Workloads {
		for i, name := range r.Candidates {
			c, _ := r.Cell(name, w.Name)
			label := ""
			if i == 0 {
				label = w.Name
			}
			cpu := "-"
			if c.CPU != nil {
				cpu = fmt.Sprintf("%.2f", *c.CPU)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f%%\t%.1f%%\t%s\t%s\t%s\t%d\t\n", label, name, thousands(c.RPS), 100*c.Ratio, 100*c.RatioECMP,
				micros(c.P50US), micros(c.P99US), cpu, c.Errors)
		}
	}
	tw.Flush()
	fmt.Fprintf(&b, "\nVS DIRECT: requests/s over the direct baseline (client to backends routed through the balancer namespace, one backend per wrk thread).\n")
	fmt.Fprintf(&b, "VS ECMP: requests/s over the ecmp baseline (the same routing, each thread's connections spread over the backends by a multipath route, as a balancer spreads them).\n")
	fmt.Fprintf(&b, "latency: every candidate gets the same paced load of %d requests/s; compare P50/P99 there.\n", r.Rate)
	fmt.Fprintf(&b, "LB CPU: cores used by a userspace balancer's processes; kernel datapaths work in softirq and are not separable.\n")
	if len(r.Missing) > 0 {
		fmt.Fprintf(&b, "not installed, not measured: %s (sluice-lab bench lb --install-peers)\n", strings.Join(r.Missing, ", "))
	}
	b.WriteString(r.stealLine())
	b.WriteString(r.switchDropsLine())
	rows := make([]pairedRow, len(r.Cells))
	for i, c := range r.Cells {
		rows[i] = pairedRow{c.Workload, c.Candidate, c.Paired}
	}
	writePairedTable(&b, r.Against, "requests/s", rows)
	b.WriteString(r.profileTable())
	return b.String()
}

// stealWorth is the share of the machine's CPU a run may lose to the hypervisor before the report
// names it: a point of a 2-core machine is about what separates the candidates compared.
const stealWorth = 0.01

// stealLine tells what the hypervisor took from the runs: the most any run lost, and how many lost
// stealWorth or more, whose figures are then low for a reason outside the lab; "" when not
// measured.
func (r *LBResults) stealLine() string {
	w := r.worstRun(func(s LBSample) *float64 { return s.Steal }, stealWorth)
	switch {
	case w.measured == 0:
		return ""
	case w.over == 0:
		return fmt.Sprintf("hypervisor steal: at most %.1f%% of the machine's CPU in any run (%s)\n", 100*w.value, w.at)
	}
	return fmt.Sprintf("hypervisor steal: %d of %d runs lost %.0f%% or more of the machine's CPU to the hypervisor, at most %.1f%% (%s): their figures are low for a reason outside the lab\n",
		w.over, w.measured, 100*stealWorth, 100*w.value, w.at)
}

// switchDropsWorth is the share of frames the lab's switch may drop in a run before the report
// names it: TCP takes a loss in a thousand frames without a timeout's stall, rarely more.
const switchDropsWorth = 0.001

// switchDropsLine tells what the lab's switch dropped at its ports: nothing, or how many runs lost
// switchDropsWorth of their frames or more and the most any run lost, whose figures then measure
// the lab's switch, not the candidate; "" when not measured.
func (r *LBResults) switchDropsLine() string {
	w := r.worstRun(func(s LBSample) *float64 { return s.SwitchDrops }, switchDropsWorth)
	switch {
	case w.measured == 0:
		return ""
	case w.value == 0:
		return "switch: no frame dropped at its ports in any run\n"
	case w.over == 0:
		return fmt.Sprintf("switch: at most %.3f%% of the frames dropped at its ports in any run (%s)\n", 100*w.value, w.at)
	}
	hint := ""
	if r.Switch == SwitchXDP {
		hint = "; frames the XDP switch redirects meet a full ring with no queue to wait in, so compare large responses on --switch stack"
	}
	return fmt.Sprintf("switch: %d of %d runs lost %.1f%% or more of their frames at the switch's ports, at most %.1f%% (%s): their figures measure the lab's switch, not the candidate%s\n",
		w.over, w.measured, 100*switchDropsWorth, 100*w.value, w.at, hint)
}

// worstRun is the largest value of a measure over the runs, the run it was in, how many runs
// measured it and how many reached worth.
type worstRun struct {
	value          float64
	at             string
	measured, over int
}

// worstRun finds the largest value measure gives a run (nil: not measured).
func (r *LBResults) worstRun(measure func(LBSample) *float64, worth float64) worstRun {
	var w worstRun
	for _, c := range r.Cells {
		for i, s := range c.Rounds {
			v := measure(s)
			if v == nil {
				continue
			}
			w.measured++
			if *v >= worth {
				w.over++
			}
			if w.at == "" || *v > w.value {
				w.value, w.at = *v, fmt.Sprintf("%s, %s, round %d", c.Candidate, c.Workload, i+1)
			}
		}
	}
	return w
}

// thousands formats n rounded, with thin separators: 61,234.
func thousands(n float64) string {
	s := fmt.Sprintf("%.0f", n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// micros formats a latency in microseconds as a duration (412µs, 1.9ms, 151ms).
func micros(us float64) string {
	d := time.Duration(us * float64(time.Microsecond))
	switch {
	case d >= 100*time.Millisecond:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	default:
		return d.Round(time.Microsecond).String()
	}
}

// SVG geometry.
const (
	svgBarWidth  = 14
	svgGroupGap  = 28
	svgPlotH     = 260
	svgMarginL   = 60
	svgMarginTop = 50
	svgLegendW   = 170
)

// svgColors are distinguishable bar colours, one per candidate in order.
var svgColors = []string{"#7f7f7f", "#1f77b4", "#2ca02c", "#17becf", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#ff7f0e", "#d62728", "#aec7e8", "#98df8a"}

// SVG draws the results as grouped bars: per workload, each candidate's requests/s as a
// percentage of direct; for the paced latency workload, its p99 as a percentage of direct's.
func (r *LBResults) SVG() string {
	groupW := len(r.Candidates)*svgBarWidth + svgGroupGap
	width := svgMarginL + len(r.Workloads)*groupW + svgLegendW
	height := svgMarginTop + svgPlotH + 70
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14" font-weight="bold">sluice-lab bench lb: requests/s as %% of direct (median of %d rounds of %s)</text>`+"\n", svgMarginL, r.Rounds, r.Duration)
	top := r.scaleTop()
	base := svgMarginTop + svgPlotH
	step := 25.0
	if top > 250 {
		step = 100
	}
	for pct := 0.0; pct <= top; pct += step {
		y := float64(base) - pct/top*svgPlotH
		stroke := "#ddd"
		if pct == 100 {
			stroke = "#444"
		}
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s"/><text x="%d" y="%.1f" text-anchor="end">%.0f%%</text>`+"\n",
			svgMarginL, svgMarginL+len(r.Workloads)*groupW, y, y, stroke, svgMarginL-4, y+4, pct)
	}
	for wi, w := range r.Workloads {
		x0 := svgMarginL + wi*groupW + svgGroupGap/2
		direct, _ := r.Cell("direct", w.Name)
		for ci, name := range r.Candidates {
			c, _ := r.Cell(name, w.Name)
			value, label := 100*c.Ratio, fmt.Sprintf("%s %s: %s req/s, %.1f%% of direct, p99 %s", w.Name, name, thousands(c.RPS), 100*c.Ratio, micros(c.P99US))
			if w.Latency && direct.P99US > 0 {
				value = 100 * c.P99US / direct.P99US
			}
			h := min(value/top*svgPlotH, svgPlotH)
			fmt.Fprintf(&b, `<rect x="%d" y="%.1f" width="%d" height="%.1f" fill="%s"><title>%s</title></rect>`+"\n",
				x0+ci*svgBarWidth, float64(base)-h, svgBarWidth-2, h, svgColors[ci%len(svgColors)], html.EscapeString(label))
		}
		caption := w.Name
		if w.Latency {
			caption = "latency: p99 % of direct, lower is better"
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", x0+len(r.Candidates)*svgBarWidth/2, base+16, html.EscapeString(caption))
	}
	lx := svgMarginL + len(r.Workloads)*groupW + 10
	for ci, name := range r.Candidates {
		y := svgMarginTop + ci*16
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
			lx, y, svgColors[ci%len(svgColors)], lx+14, y+9, html.EscapeString(name))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// scaleTop is the percentage at the top of the chart: 125%, or more if a candidate beat direct by more.
func (r *LBResults) scaleTop() float64 {
	top := 125.0
	for _, w := range r.Workloads {
		direct, _ := r.Cell("direct", w.Name)
		for _, c := range r.Cells {
			switch {
			case c.Workload != w.Name:
			case w.Latency && direct.P99US > 0:
				top = max(top, 100*c.P99US/direct.P99US)
			default:
				top = max(top, 100*c.Ratio)
			}
		}
	}
	return top
}
