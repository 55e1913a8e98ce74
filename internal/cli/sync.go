package cli

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicelb/sluice/internal/api"
	"github.com/sluicelb/sluice/internal/replication"
)

func syncCmd(g *globals) *cobra.Command {
	return viewCmd(g, "sync", "Show the replication of flows to the other balancer nodes: conntrackd, each peer, the initial sync", (*api.Client).Sync,
		func(w io.Writer, s replication.Status) error { return printSync(w, s, time.Now()) })
}

func printSync(w io.Writer, s replication.Status, now time.Time) error {
	if !s.Enabled {
		fmt.Fprintln(w, "sync: off (the config has no sync section)")
		return nil
	}
	fmt.Fprintf(w, "sync: %s: %s\n", readiness(s.Ready), s.Why)
	if c := s.Conntrackd; c != nil {
		state := "running, pid " + fmt.Sprint(c.PID) + ", for " + ago(now, c.Since)
		if !c.Running {
			state = "NOT RUNNING: " + c.Reason
		}
		fmt.Fprintf(w, "conntrackd: %s; %d restarts; sent %d, received %d packets; %d entries written; %d errors; %d foreign packets dropped; %.1fs of CPU\n",
			state, c.Restarts, c.Stats.PacketsSent, c.Stats.PacketsReceived, c.Stats.Injected(),
			c.Stats.SendErrors+c.Stats.ReceiveErrors+c.Stats.MalformedMessages+c.Stats.LostMessages, c.ForeignDrops, c.CPUSeconds)
	}
	if c := s.ConntrackResync; c != nil {
		paused := ""
		if !c.PausedSince.IsZero() {
			paused = fmt.Sprintf("; paused %s ago (conntrackd down: its peers do not hear this node)", ago(now, c.PausedSince))
		}
		fmt.Fprintf(w, "conntrack table resync: node %s; initial sync %s%s; %d send errors; dropped datagrams: %s\n",
			c.NodeID, initialSync(c, now), paused, c.SendErrors, counts(c.Drops))
		if err := printPeers(w, c.Peers, now); err != nil {
			return err
		}
	}
	f := s.Flows
	if f == nil {
		return nil
	}
	fmt.Fprintf(w, "flows: node %s; queue %d of %d, %d dropped; %d events lost; %d send errors; dropped datagrams: %s; %d refreshes, %d skipped, %d failed; peers' flows all here until %s\n",
		f.NodeID, f.QueueLength, f.QueueLimit, f.QueueDrops, f.LostEvents, f.SendErrors, counts(f.Drops), f.Refreshes, f.RefreshesSkipped, f.RefreshErrors,
		agoPrecise(now, f.ReplicatedUntil))
	return printPeers(w, f.Peers, now)
}

// printPeers writes a replication's peers as a table, after an empty line.
func printPeers(w io.Writer, peers []replication.PeerStatus, now time.Time) error {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "PEER\tCONNECTED\tLAST SEEN\tSENT\tRECEIVED\tLAG\tLAST RESYNC\tSKIPPED\tDROPPED")
	for _, p := range peers {
		resync := "-"
		if r := p.LastResync; !r.At.IsZero() {
			resync = fmt.Sprintf("%s ago, %d entries in %s", ago(now, r.At), r.Entries, r.DurationNS.Round(time.Millisecond))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", p.Address, yesNo(p.Connected), ago(now, p.LastSeen),
			p.SentEntries, p.ReceivedEntries, p.LagNS.Round(time.Millisecond), resync, counts(p.Skipped), counts(p.Drops))
	}
	return tw.Flush()
}

// initialSync tells how a replication's initial sync went.
func initialSync(f *replication.FlowStatus, now time.Time) string {
	switch is := f.InitialSync; {
	case !is.Done:
		return "not done"
	case is.WithoutPeer:
		return "done without a peer " + ago(now, is.At) + " ago"
	default:
		return "done from " + is.Peer + " " + ago(now, is.At) + " ago"
	}
}

// readiness names a readiness for a listing.
func readiness(ready bool) string {
	if ready {
		return "ready"
	}
	return "NOT READY"
}

// ago is how long before now t was, "-" when never.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return now.Sub(t).Round(time.Second).String()
}

// agoPrecise is "<how long> ago" to the millisecond, "-" when never.
func agoPrecise(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return now.Sub(t).Round(time.Millisecond).String() + " ago"
}

// counts writes counters by reason, the reasons sorted, "-" when there are none.
func counts(m map[string]uint64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}
