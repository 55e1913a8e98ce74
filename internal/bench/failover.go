package bench

// `sluice-lab bench failover`: what the events of a keepalived pair's life (a node's death, a VRRP
// takeover and fail-back, a drain, a daemon restart, a binary upgrade, a node lost while the
// backends change), and those of a BGP/ECMP fleet's (the fleet-... events), cost the connections
// that run through them, per datapath and mode: broken long-lived connections, failed new ones,
// and the time until the pair or the fleet has reconverged.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/lab"
)

// FailoverOptions configure `sluice-lab bench failover`.
type FailoverOptions struct {
	Datapaths []string `json:"datapaths"`
	Modes     []string `json:"modes"`
	// Events select among FailoverEvents (the pair's) and FleetFailoverEvents by name; the rows
	// of the table.
	Events []string `json:"events"`
	// Conns is the number of long-lived connections, each making a request every 100 ms.
	Conns int `json:"conns"`
	// NewRate is the new connections a second (one request each) that run through every event.
	NewRate int `json:"new_per_second"`
	// KeepLab leaves the lab up afterwards.
	KeepLab bool `json:"keep_lab"`
}

// The bounds of the options, and of what a cell counts as broken.
const (
	maxFailoverConns   = 1000
	maxFailoverNewRate = 200
	// stallLimit: a request not answered within it broke its connection.
	stallLimit = 5 * time.Second
	// requestPause is the pause of a long-lived connection between an answer and its next request.
	requestPause = 100 * time.Millisecond
)

// FailoverModes are the modes bench failover measures: the pair's backends share the nodes'
// segment and decapsulate nothing, so tunnel is not among them.
var FailoverModes = []config.Mode{config.ModeNAT, config.ModeFullNAT, config.ModeDSR}

// Check reports the first option out of range, naming its flag.
func (o FailoverOptions) Check() error {
	return firstError(
		checkDatapaths("datapath", o.Datapaths),
		checkOneOf("modes", "mode", o.Modes, FailoverModes),
		checkOneOf("events", "event", o.Events, slices.Concat(FailoverEvents, FleetFailoverEvents)),
		checkRange("conns", o.Conns, 1, maxFailoverConns),
		checkRange("new-rate", o.NewRate, 1, maxFailoverNewRate),
	)
}

// checkRange refuses a count flag outside least..most.
func checkRange(flag string, v, least, most int) error {
	if v < least || v > most {
		return fmt.Errorf("--%s: %d is not %d..%d", flag, v, least, most)
	}
	return nil
}

// FailoverResults are what `sluice-lab bench failover` measured, and how.
type FailoverResults struct {
	Options  FailoverOptions `json:"options"`
	Backends int             `json:"backends"`
	// StallLimitS: a request not answered within it broke its connection.
	StallLimitS float64 `json:"stall_limit_s"`
	// Method says how a cell runs, for the JSON's readers.
	Method string         `json:"method"`
	Cells  []FailoverCell `json:"cells"`
}

// FailoverCell is one event in one datapath and mode.
type FailoverCell struct {
	Event    string `json:"event"`
	Datapath string `json:"datapath"`
	Mode     string `json:"mode"`
	// LongLived connections were open across the event; LongLivedBroken of them were reset,
	// failed or stalled past the stall limit; Requests is the requests they made.
	LongLived       int `json:"long_lived"`
	LongLivedBroken int `json:"long_lived_broken"`
	Requests        int `json:"requests"`
	// BrokenAtS are the times, from the event (negative: before it), of the requests that broke
	// the long-lived connections, sorted.
	BrokenAtS []float64 `json:"long_lived_broken_at_s,omitempty"`
	// SlowestS is the slowest answered long-lived request: the longest a connection waited.
	SlowestS float64 `json:"slowest_request_s"`
	// NewConns were opened during the cell (one request each); NewFailed of them failed.
	NewConns  int `json:"new_conns"`
	NewFailed int `json:"new_failed"`
	// Broken is LongLivedBroken+NewFailed of Total (LongLived+NewConns).
	Broken int `json:"broken"`
	Total  int `json:"total"`
	// ReconvergeS is the time from the event until the pair had reconverged (the event's own
	// condition: the address moved, or the restarted daemon ready and master again; in the fleet,
	// the router's routes those of the nodes up); ReturnS, for a drain, from the undrain until
	// the node was master again (in the fleet: routed again).
	ReconvergeS float64 `json:"reconverge_s"`
	ReturnS     float64 `json:"return_s,omitempty"`
	// AddressMoves counts the changes of the front VRRP address's holder during a pair's cell;
	// RouteChanges those of the router's next hops for the VIP during a fleet's.
	AddressMoves int `json:"address_moves"`
	RouteChanges int `json:"route_changes,omitempty"`
	// LongLivedOnNode, in the fleet, is how many of the long-lived connections the router sends
	// through the node the event befalls (node 2) when both nodes are up.
	LongLivedOnNode int `json:"long_lived_on_node,omitempty"`
	// Unsupported, when set, says why the cell was not measured.
	Unsupported string `json:"unsupported,omitempty"`
	// Errors are the first distinct errors the broken connections saw, to say why.
	Errors []string `json:"errors,omitempty"`
}

// failoverMethod is the Method of the results.
func failoverMethod(o FailoverOptions) string {
	pairEvents, fleetEvents := splitEvents(o.Events)
	var parts []string
	if len(pairEvents) > 0 {
		parts = append(parts, pairMethod)
	}
	if len(fleetEvents) > 0 {
		parts = append(parts, fleetMethod)
	}
	return strings.Join(parts, " ") + fmt.Sprintf(" Per cell: %d long-lived "+
		"keep-alive connections each making a request every %s and %d new connections a second (one request each) run from "+
		"2 s before the event until %s after the pair or fleet reconverged. Broken: a long-lived connection reset, failed or not answered "+
		"within %s, or a new connection that failed within %s.", o.Conns, requestPause, o.NewRate, settleTime, stallLimit, stallLimit)
}

// The topologies' parts of the Method.
const (
	pairMethod = "Pair events: a keepalived pair in the fleet lab (VRRPv3 adverts every 100 ms, a front and a backends'-side " +
		"address in one sync group, track script `sluice node check`, both nodes with a sync section over the backends' side; " +
		"fullnat translates to the backends'-side VRRP address; nat backends route the client via it)."
	fleetMethod = "Fleet events (fleet-...): nodes 1 and 2 of the fleet lab announce the VIP over BGP (hold time " + fleetFailoverHold +
		", BFD 100 ms x 3 with BIRD) and the router spreads it by ECMP; both nodes have a sync section over the backends' side; " +
		"fullnat translates to a source of each node's own, every node's in bgp.fullnat_sources; the events befall node 2. " +
		"nat is not measured: " + natBehindECMP + "."
)

// splitEvents splits events into the pair's and the fleet's, each in the given order.
func splitEvents(events []string) (pairEvents, fleetEvents []string) {
	for _, ev := range events {
		if slices.Contains(FleetFailoverEvents, ev) {
			fleetEvents = append(fleetEvents, ev)
		} else {
			pairEvents = append(pairEvents, ev)
		}
	}
	return pairEvents, fleetEvents
}

// RunFailover brings up a fleet lab of two nodes (with BFD on the router's sessions when a fleet
// event is asked for) and, for each datapath and mode, runs the pair's events in the pair, then
// the fleet's in the fleet, each under load. o must pass Check.
func RunFailover(ctx context.Context, e *Env, o FailoverOptions) (*FailoverResults, error) {
	pairEvents, fleetEvents := splitEvents(o.Events)
	e.Lab.Balancers = 2
	if len(fleetEvents) > 0 {
		e.Lab.BFD = &lab.BFD{}
	}
	e.Progress.Step("fleet lab %s: two Sluice nodes behind a BIRD router", e.Lab.Prefix)
	res := &FailoverResults{Options: o, Backends: e.Lab.Backends, StallLimitS: stallLimit.Seconds(), Method: failoverMethod(o)}
	err := e.InLab(ctx, o.KeepLab, func() error {
		ports := &portRanges{}
		for _, dp := range o.Datapaths {
			for _, mode := range o.Modes {
				if len(pairEvents) > 0 {
					if err := e.benchPair(ctx, dp, mode, pairEvents, o, ports, res); err != nil {
						return fmt.Errorf("%s %s: %w", dp, mode, err)
					}
				}
				if len(fleetEvents) > 0 {
					if err := e.benchFleetPair(ctx, dp, mode, fleetEvents, o, ports, res); err != nil {
						return fmt.Errorf("fleet %s %s: %w", dp, mode, err)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// benchPair runs every event in the pair on one datapath and mode.
func (e *Env) benchPair(ctx context.Context, dp, mode string, events []string, o FailoverOptions, ports *portRanges, res *FailoverResults) (err error) {
	e.Progress.Step("%s %s: starting the pair", dp, mode)
	p, err := e.startPair(ctx, dp, mode)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, p.stop(context.WithoutCancel(ctx))) }()
	for _, name := range events {
		e.Progress.Step("%s %s: %s under %d long-lived connections and %d new a second", dp, mode, name, o.Conns, o.NewRate)
		c, err := p.runCell(ctx, name, o, ports)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		res.Cells = append(res.Cells, c)
		e.Progress.Step("%s %s: %s: %s broken; restoring the pair", dp, mode, name, c.label())
		if err := p.restore(ctx); err != nil {
			return fmt.Errorf("%s: restoring the pair: %w", name, err)
		}
	}
	return nil
}

// Cell returns the cell of event in datapath and mode, if measured.
func (r *FailoverResults) Cell(event, datapath, mode string) (FailoverCell, bool) {
	for _, c := range r.Cells {
		if c.Event == event && c.Datapath == datapath && c.Mode == mode {
			return c, true
		}
	}
	return FailoverCell{}, false
}

// label is the cell as the table shows it: broken/total (reconvergence), or unsupported.
func (c FailoverCell) label() string {
	if c.Unsupported != "" {
		return "unsupported"
	}
	return fmt.Sprintf("%d/%d (%.1fs)", c.Broken, c.Total, c.ReconvergeS)
}

// Table renders the results for people: a row per event, a column per datapath and mode, then
// the errors behind the broken connections.
func (r *FailoverResults) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sluice-lab bench failover: %s, %d long-lived connections (a request every %s) and %d new connections/s through each event, %d backends\n",
		topologies(r.Options.Events), r.Options.Conns, requestPause, r.Options.NewRate, r.Backends)
	b.WriteString("cell: broken/total (reconvergence in seconds); broken = a long-lived connection reset or stalled past " +
		stallLimit.String() + ", or a new connection that failed\n\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := []string{"EVENT"}
	for _, dp := range r.Options.Datapaths {
		for _, m := range r.Options.Modes {
			head = append(head, strings.ToUpper(dp+"-"+m))
		}
	}
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, ev := range r.Options.Events {
		row := []string{ev}
		for _, dp := range r.Options.Datapaths {
			for _, m := range r.Options.Modes {
				label := "-"
				if c, ok := r.Cell(ev, dp, m); ok {
					label = c.label()
				}
				row = append(row, label)
			}
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	tw.Flush()
	b.WriteString(r.onNodeDetail())
	b.WriteString(r.brokenDetail())
	b.WriteString(r.unsupportedDetail())
	return b.String()
}

// topologies names what the events ran in, for the table's title.
func topologies(events []string) string {
	pairEvents, fleetEvents := splitEvents(events)
	switch {
	case len(fleetEvents) == 0:
		return "a keepalived pair"
	case len(pairEvents) == 0:
		return "a BGP/ECMP fleet of two nodes (fleet-... rows, BFD)"
	}
	return "a keepalived pair, and a BGP/ECMP fleet of two nodes (fleet-... rows, BFD)"
}

// onNodeDetail lists, per fleet event, how many long-lived connections of each measured cell
// ran through the node the event befell: those a broken cell would have lost.
func (r *FailoverResults) onNodeDetail() string {
	var b strings.Builder
	for _, ev := range r.Options.Events {
		var cells []string
		for _, c := range r.Cells {
			if c.Event == ev && c.Unsupported == "" && slices.Contains(FleetFailoverEvents, ev) {
				cells = append(cells, fmt.Sprintf("%s-%s %d/%d", c.Datapath, c.Mode, c.LongLivedOnNode, c.LongLived))
			}
		}
		if len(cells) == 0 {
			continue
		}
		if b.Len() == 0 {
			fmt.Fprintf(&b, "\nlong-lived connections through node %d, the node the fleet's events befall (the router's ECMP choice with both nodes up):\n", fleetNode)
		}
		fmt.Fprintf(&b, "  %s: %s\n", ev, strings.Join(cells, ", "))
	}
	return b.String()
}

// unsupportedDetail says once, for each reason cells were not measured, which cells and why.
func (r *FailoverResults) unsupportedDetail() string {
	var reasons []string
	cells := map[string][]string{}
	for _, c := range r.Cells {
		if c.Unsupported == "" {
			continue
		}
		if _, ok := cells[c.Unsupported]; !ok {
			reasons = append(reasons, c.Unsupported)
		}
		name := c.Datapath + "-" + c.Mode
		if !slices.Contains(cells[c.Unsupported], name) {
			cells[c.Unsupported] = append(cells[c.Unsupported], name)
		}
	}
	var b strings.Builder
	for _, why := range reasons {
		fmt.Fprintf(&b, "\nunsupported (%s, not measured): %s\n", strings.Join(cells[why], ", "), why)
	}
	return b.String()
}

// brokenSpan says when, from the event, the long-lived connections broke: " at 1.2-1.4s".
func brokenSpan(at []float64) string {
	if len(at) == 0 {
		return ""
	}
	return fmt.Sprintf(" (requests sent at %.2f..%.2fs)", at[0], at[len(at)-1])
}

// moves says how the traffic moved during the cell: the address's moves in the pair, the
// router's route changes in the fleet.
func (c FailoverCell) moves() string {
	if slices.Contains(FleetFailoverEvents, c.Event) {
		return fmt.Sprintf("route changes %d", c.RouteChanges)
	}
	return fmt.Sprintf("address moves %d", c.AddressMoves)
}

// brokenDetail lists, for each cell with broken connections, which ones and the errors seen.
func (r *FailoverResults) brokenDetail() string {
	var b strings.Builder
	for _, c := range r.Cells {
		if c.Broken == 0 {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("\nbroken:\n")
		}
		fmt.Fprintf(&b, "  %s %s-%s: %d of %d long-lived%s, %d of %d new; %s; %s\n", c.Event, c.Datapath, c.Mode,
			c.LongLivedBroken, c.LongLived, brokenSpan(c.BrokenAtS), c.NewFailed, c.NewConns, c.moves(), strings.Join(c.Errors, "; "))
	}
	return b.String()
}
