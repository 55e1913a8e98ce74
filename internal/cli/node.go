package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicelb/sluice/internal/api"
	"github.com/sluicelb/sluice/internal/engine"
)

func bgpCmd(g *globals) *cobra.Command {
	return viewCmd(g, "bgp", "Show the node's BGP sessions and which VIPs it announces, and why", (*api.Client).BGP,
		func(w io.Writer, v engine.BGPView) error { return printBGP(w, v, time.Now()) })
}

func printBGP(w io.Writer, v engine.BGPView, now time.Time) error {
	if !v.Enabled {
		fmt.Fprintln(w, "bgp: off (the config has no bgp section)")
		return nil
	}
	fmt.Fprintf(w, "bgp: AS %d, router id %s, %s; node %s\n", v.ASN, v.RouterID, listening(v.ListenPort), v.Node.State)
	if v.Failed != "" {
		fmt.Fprintf(w, "bgp: NOT RUNNING THE CONFIG: %s\n", v.Failed)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "PEER\tAS\tSTATE\tFOR\tHOLD\tBFD\tSENT\tRECEIVED\tFLAPS\tLAST ERROR")
	for _, p := range v.Peers {
		since := "-"
		if !p.Since.IsZero() {
			since = now.Sub(p.Since).Round(time.Second).String()
		}
		hold := "-"
		if p.HoldTimeSeconds > 0 {
			hold = fmt.Sprintf("%gs", p.HoldTimeSeconds)
		}
		bfd := p.BFD
		if bfd == "" {
			bfd = "off"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\n", peerAddress(p), p.ASN, p.State, since, hold, bfd,
			p.PrefixesSent, p.PrefixesReceived, p.Flaps, p.LastError)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "VIP\tANNOUNCED\tFOR\tSERVICES\tWHY")
	for _, vip := range v.VIPs {
		services := strings.Join(vip.Services, ",")
		if vip.Role != "" {
			services = "(" + vip.Role + ") " + services
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", vip.VIP, yesNo(vip.Announced), now.Sub(vip.Since).Round(time.Second),
			strings.TrimSpace(services), vip.Reason)
	}
	return tw.Flush()
}

func listening(port int32) string {
	if port < 0 {
		return "not listening (dials its peers)"
	}
	return fmt.Sprintf("listening on port %d", port)
}

func peerAddress(p engine.PeerView) string {
	if p.Port == 0 || p.Port == 179 {
		return p.Address
	}
	if strings.Contains(p.Address, ":") {
		return fmt.Sprintf("[%s]:%d", p.Address, p.Port)
	}
	return fmt.Sprintf("%s:%d", p.Address, p.Port)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func nodeCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "node", Short: "Drain or undrain this balancer node (withdraw or announce its VIPs)"}
	var output string
	status := &cobra.Command{
		Use: "status [-o table|json|yaml]", Short: "Show whether the node is active, draining or drained", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := askNode(cmd, g, (*api.Client).Node)
			if err != nil {
				return err
			}
			return emit(cmd.OutOrStdout(), output, n, func(w io.Writer) error { return printNode(w, n) })
		},
	}
	outputFlag(status, &output)
	undrain := &cobra.Command{
		Use: "undrain", Short: "End a node drain: announce the VIPs again", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := askNode(cmd, g, (*api.Client).UndrainNode)
			if err != nil {
				return err
			}
			return printNode(cmd.OutOrStdout(), n)
		},
	}
	check := &cobra.Command{
		Use:   "check",
		Short: "Exit 0 when the node should take traffic, 1 when not (for keepalived's track_script)",
		Long: `Check asks the daemon whether the node should take traffic: it answers, it is not drained, its
datapath applied the running config, and a VIP of it can take new flows (a backend up, or a sorry
server). It prints why and exits 1 otherwise, also when the daemon does not answer: a keepalived
track_script running it moves the VRRP address to the other node.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := askNode(cmd, g, (*api.Client).Node)
			if err != nil {
				return err
			}
			if !n.Ready {
				return fmt.Errorf("not ready: %s", n.Why)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "ready: %s\n", n.Why)
			return nil
		},
	}
	cmd.AddCommand(nodeDrainCmd(g), undrain, status, check)
	return cmd
}

// askNode makes one node call of the daemon's API.
func askNode(cmd *cobra.Command, g *globals, call func(*api.Client, context.Context) (engine.NodeView, error)) (engine.NodeView, error) {
	c, err := g.requireDaemon(cmd.Context())
	if err != nil {
		return engine.NodeView{}, err
	}
	return call(c, cmd.Context())
}

func nodeDrainCmd(g *globals) *cobra.Command {
	var timeout time.Duration
	var noWait bool
	cmd := &cobra.Command{
		Use:   "drain [--timeout 5m] [--no-wait]",
		Short: "Withdraw every VIP from the routers and follow the node's active flows down to drained",
		Long: `Drain withdraws every VIP this node announces over BGP, so that the routers send the flows
to the other nodes, and keeps forwarding whatever still reaches it. The command then follows the
node's active flows (every service's) until none is left or the timeout passes, when the daemon
emits a "node_drained" event. With --no-wait it returns at once. "sluice node undrain" announces
the VIPs again.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if timeout <= 0 || timeout > api.MaxDrainTimeout {
				return fmt.Errorf("--timeout: %s is not a duration above 0 and at most %s (like 5m)", timeout, api.MaxDrainTimeout)
			}
			c, err := g.requireDaemon(cmd.Context())
			if err != nil {
				return err
			}
			ctx, out := cmd.Context(), cmd.OutOrStdout()
			n, err := c.DrainNode(ctx, timeout)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "draining the node: every vip withdrawn, %d active flows, timeout %s\n",
				n.ActiveFlows, n.Deadline.Sub(n.Started).Round(time.Second))
			if noWait {
				return nil
			}
			last := n.ActiveFlows
			for n.State == engine.NodeDraining {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(time.Second):
				}
				if n, err = c.Node(ctx); err != nil {
					return err
				}
				if n.ActiveFlows != last {
					fmt.Fprintf(out, "  %d active flows\n", n.ActiveFlows)
					last = n.ActiveFlows
				}
			}
			if n.State != engine.NodeDrained {
				return fmt.Errorf("the drain ended: the node is %s again", n.State)
			}
			fmt.Fprintf(out, "drained: %s\n", n.Reason)
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", engine.DefaultDrainTimeout, "give up waiting for flows to end after this long")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "return once the VIPs are withdrawn")
	return cmd
}

func printNode(w io.Writer, n engine.NodeView) error {
	switch n.State {
	case engine.NodeActive:
		ready := "ready"
		if !n.Ready {
			ready = "not ready"
		}
		_, err := fmt.Fprintf(w, "node active, %s: %s\n", ready, n.Why)
		return err
	case engine.NodeDraining:
		_, err := fmt.Fprintf(w, "node draining since %s: %d of %d flows still active, deadline %s\n",
			n.Started.Format(time.RFC3339), n.ActiveFlows, n.InitialFlows, n.Deadline.Format(time.RFC3339))
		return err
	}
	_, err := fmt.Fprintf(w, "node drained at %s: %s\n", n.Finished.Format(time.RFC3339), n.Reason)
	return err
}
