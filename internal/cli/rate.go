package cli

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicelb/sluice/internal/engine"
)

// The bounds of list --rate's --interval.
const (
	minRateInterval = 100 * time.Millisecond
	maxRateInterval = time.Minute
)

// ServiceRate is a service's traffic per second over an interval (list --rate): new flows
// (connections), packets and bytes from clients, summed over its backends.
type ServiceRate struct {
	Name     string        `json:"name"`
	Protocol string        `json:"protocol"`
	VIP      string        `json:"vip"`
	Ports    string        `json:"ports"`
	Rates    Rates         `json:"rates"`
	Backends []BackendRate `json:"backends"`
}

// BackendRate is one backend's traffic per second over the interval.
type BackendRate struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	Port    int    `json:"port,omitempty"`
	Rates   Rates  `json:"rates"`
}

// Rates are counters' growth per second.
type Rates struct {
	CPS float64 `json:"cps"`
	// InPPS and InBPS are absent where the datapath does not count packets (nft.packet_counters).
	InPPS *float64 `json:"in_pps,omitempty"`
	InBPS *float64 `json:"in_bps,omitempty"`
}

// runRate reads the counters twice, interval apart, and prints their rates.
func runRate(cmd *cobra.Command, g *globals, args []string, o listOptions) error {
	if o.interval < minRateInterval || o.interval > maxRateInterval {
		return fmt.Errorf("--interval: %v is not within %v..%v", o.interval, minRateInterval, maxRateInterval)
	}
	read := func() ([]engine.ServiceView, time.Time, error) {
		services, err := listServices(cmd.Context(), g)
		if err == nil && len(args) == 1 {
			services, err = filterServices(services, args[0])
		}
		return services, time.Now(), err
	}
	before, start, err := read()
	if err != nil {
		return err
	}
	select {
	case <-cmd.Context().Done():
		return cmd.Context().Err()
	case <-time.After(o.interval):
	}
	after, end, err := read()
	if err != nil {
		return err
	}
	rates := serviceRates(before, after, end.Sub(start))
	return emit(cmd.OutOrStdout(), o.output, rates, func(w io.Writer) error { return printRates(w, rates) })
}

// serviceRates are the rates of the services read after, from what was read elapsed before. A
// backend new since, or whose counters went back (reprogrammed), counts from zero.
func serviceRates(before, after []engine.ServiceView, elapsed time.Duration) []ServiceRate {
	was := map[string]engine.BackendView{}
	for _, s := range before {
		for _, b := range s.Backends {
			was[s.Name+"/"+b.ID] = b
		}
	}
	out := []ServiceRate{}
	for _, s := range after {
		r := ServiceRate{Name: s.Name, Protocol: string(s.Protocol), VIP: s.VIP.String(), Ports: s.Ports, Backends: []BackendRate{}}
		for _, b := range s.Backends {
			old := was[s.Name+"/"+b.ID]
			br := BackendRate{ID: b.ID, Address: b.Address, Port: b.Port, Rates: Rates{
				CPS:   perSecond(old.Flows, b.Flows, elapsed),
				InPPS: countPerSecond(old.Packets, b.Packets, elapsed),
				InBPS: countPerSecond(old.Bytes, b.Bytes, elapsed),
			}}
			r.Rates.CPS += br.Rates.CPS
			r.Rates.InPPS = addRate(r.Rates.InPPS, br.Rates.InPPS)
			r.Rates.InBPS = addRate(r.Rates.InBPS, br.Rates.InBPS)
			r.Backends = append(r.Backends, br)
		}
		out = append(out, r)
	}
	return out
}

// perSecond is a counter's growth from before to after per second of elapsed; a counter that
// went back was reset, and counts from zero.
func perSecond(before, after uint64, elapsed time.Duration) float64 {
	if elapsed <= 0 {
		return 0
	}
	if after < before {
		before = 0
	}
	return float64(after-before) / elapsed.Seconds()
}

// countPerSecond is perSecond of an optional count: nil when after is not counted.
func countPerSecond(before, after *uint64, elapsed time.Duration) *float64 {
	if after == nil {
		return nil
	}
	var from uint64
	if before != nil {
		from = *before
	}
	r := perSecond(from, *after, elapsed)
	return &r
}

// addRate adds an optional rate to an optional sum.
func addRate(sum, r *float64) *float64 {
	if r == nil {
		return sum
	}
	total := *r
	if sum != nil {
		total += *sum
	}
	return &total
}

// printRates writes the ipvsadm -Ln --rate layout: a line per service, an indented line per backend.
func printRates(w io.Writer, rates []ServiceRate) error {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 8, 2, ' ', 0)
	row := func(cells ...string) { fmt.Fprintln(tw, strings.Join(cells, "\t")) }
	row("Prot LocalAddress:Port", "Name", "CPS", "InPPS", "InBPS")
	row("  -> RemoteAddress:Port", "", "", "", "")
	cells := func(r Rates) []string {
		return []string{rate(r.CPS), optionalRate(r.InPPS), optionalRate(r.InBPS)}
	}
	for _, s := range rates {
		row(append([]string{strings.ToUpper(s.Protocol) + "  " + hostPort(s.VIP, s.Ports), s.Name}, cells(s.Rates)...)...)
		for _, b := range s.Backends {
			port := s.Ports
			if b.Port != 0 {
				port = strconv.Itoa(b.Port)
			}
			row(append([]string{"  -> " + hostPort(b.Address, port), ""}, cells(b.Rates)...)...)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeTrimmed(w, buf.String())
}

// rate writes a rate as a whole number, as ipvsadm does, or with one decimal under 10.
// optionalRate is rate, or "-" for a rate not counted.
func optionalRate(v *float64) string {
	if v == nil {
		return "-"
	}
	return rate(*v)
}

func rate(v float64) string {
	if v < 10 {
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}
