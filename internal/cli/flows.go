package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sluicelb/sluice/internal/datapath"
)

func flowsCmd(g *globals) *cobra.Command {
	var output, backend string
	var limit int
	cmd := &cobra.Command{
		Use:   "flows SERVICE [--backend ADDR[:PORT]] [--limit N] [-o table|json|yaml]",
		Short: "List the flows the datapath tracks for a service (like ipvsadm -Lnc)",
		Long: `Lists a service's flows, one a line: the client, the VIP, the backend, the state the flow
entry tells and the time left until it expires without another packet (for fullnat, also the
balancer-side source port). nft nat and fullnat flows are conntrack entries (TCP states such as
ESTABLISHED or TIME_WAIT; REPLIED or UNREPLIED for UDP), nft dsr flows elements of the service's
flow map (no state), ebpf flows entries of the flow table (ACTIVE, CLOSING, IDLE). Through the
daemon when one runs, from the kernel otherwise. At most --limit flows are listed; the table
says how many more there are.`,
		Example: `  sluice flows web
  sluice flows web --backend 10.91.2.12:80 --limit 50
  sluice flows web -o json`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completeServices,
		RunE: func(cmd *cobra.Command, args []string) error {
			filter, err := datapath.ParseFlowFilter(backend, limit)
			if err != nil {
				return fmt.Errorf("--%w", err)
			}
			list, err := readFlows(cmd.Context(), g, args[0], filter)
			if err != nil {
				return err
			}
			return emit(cmd.OutOrStdout(), output, list, func(w io.Writer) error { return printFlows(w, list) })
		},
	}
	cmd.Flags().StringVar(&backend, "backend", "", "only the flows to this backend (ADDR or ADDR:PORT)")
	cmd.Flags().IntVar(&limit, "limit", datapath.DefaultFlowLimit, fmt.Sprintf("the most flows listed (at most %d)", datapath.MaxFlowLimit))
	outputFlag(cmd, &output)
	return cmd
}

// readFlows asks the daemon, or reads the kernel when no daemon runs.
func readFlows(ctx context.Context, g *globals, service string, filter datapath.FlowFilter) (datapath.FlowList, error) {
	c, err := g.daemon(ctx)
	if err != nil {
		return datapath.FlowList{}, err
	}
	if c != nil {
		return c.Flows(ctx, service, filter)
	}
	dp, err := whichDatapath(g, "")
	if err != nil {
		return datapath.FlowList{}, err
	}
	defer dp.Close()
	lister, ok := dp.(datapath.FlowLister)
	if !ok {
		return datapath.FlowList{}, errors.New("this datapath cannot list flows")
	}
	return lister.Flows(ctx, service, filter)
}

// printFlows writes a flow a line under a header, and how many flows the limit left out.
func printFlows(w io.Writer, list datapath.FlowList) error {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 8, 2, ' ', 0)
	row := func(cells ...string) { fmt.Fprintln(tw, strings.Join(cells, "\t")) }
	row("Pro", "Client", "VIP", "Backend", "State", "Expires", "NATPort")
	for _, f := range list.Flows {
		nat := "-"
		if f.NATPort != 0 {
			nat = strconv.Itoa(int(f.NATPort))
		}
		row(strings.ToUpper(string(f.Protocol)), f.Client.String(), f.VIP.String(), f.Backend.String(), orDash(f.State), minutesSeconds(f.ExpiresIn), nat)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if more := list.Total - len(list.Flows); more > 0 {
		fmt.Fprintf(&buf, "... %d more (--limit)\n", more)
	}
	return writeTrimmed(w, buf.String())
}

// minutesSeconds writes seconds as ipvsadm -Lnc writes an expiry: 04:59, or 1:02:03 past an hour.
func minutesSeconds(s uint32) string {
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%02d:%02d", s/60, s%60)
}
