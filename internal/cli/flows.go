package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
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

// readFlows asks the daemon, or reads the kernel when no daemon runs. A --backend that is none
// of the service's backends is refused.
func readFlows(ctx context.Context, g *globals, service string, filter datapath.FlowFilter) (datapath.FlowList, error) {
	c, err := g.daemon(ctx)
	if err != nil {
		return datapath.FlowList{}, err
	}
	if c != nil {
		err := checkMember(service, filter, func() ([]backendAt, error) {
			view, err := c.Service(ctx, service)
			members := make([]backendAt, len(view.Backends))
			for i, b := range view.Backends {
				members[i] = backendAt{b.Address, b.Port}
			}
			return members, err
		})
		if err != nil {
			return datapath.FlowList{}, err
		}
		return c.Flows(ctx, service, filter)
	}
	dp, err := whichDatapath(g, "")
	if err != nil {
		return datapath.FlowList{}, err
	}
	defer dp.Close()
	lister, ok := dp.(interface {
		datapath.FlowLister
		ServiceStatus(ctx context.Context, name string) (datapath.ServiceStatus, bool, error)
	})
	if !ok {
		return datapath.FlowList{}, errors.New("this datapath cannot list flows")
	}
	err = checkMember(service, filter, func() ([]backendAt, error) {
		status, found, err := lister.ServiceStatus(ctx, service)
		if err == nil && !found {
			err = fmt.Errorf("service %s: %w", service, datapath.ErrNoService)
		}
		members := make([]backendAt, len(status.Backends))
		for i, b := range status.Backends {
			members[i] = backendAt{b.Address, b.Port}
		}
		return members, err
	})
	if err != nil {
		return datapath.FlowList{}, err
	}
	return lister.Flows(ctx, service, filter)
}

// backendAt is a service's backend as the daemon or the datapath lists it (port 0: the client's).
type backendAt struct {
	address string
	port    int
}

// checkMember refuses a filter whose --backend is none of the service's backends, which
// members reads: a listing of its flows would always be empty, and say nothing of the mistake.
func checkMember(service string, filter datapath.FlowFilter, members func() ([]backendAt, error)) error {
	if !filter.Backend.IsValid() {
		return nil
	}
	backends, err := members()
	if err != nil {
		return err
	}
	for _, b := range backends {
		addr, err := netip.ParseAddr(b.address)
		if err == nil && addr == filter.Backend && (filter.BackendPort == 0 || b.port == 0 || b.port == int(filter.BackendPort)) {
			return nil
		}
	}
	asked := filter.Backend.String()
	if filter.BackendPort != 0 {
		asked = netip.AddrPortFrom(filter.Backend, filter.BackendPort).String()
	}
	return fmt.Errorf("--backend %s: not a backend of service %s", asked, service)
}

// flowEnd is a flow's client, VIP or backend: "-" when the datapath does not know it, the
// address alone when it does not know the port (nft dsr over IPv6 keeps a hash of the flow).
func flowEnd(ap netip.AddrPort) string {
	switch {
	case !ap.IsValid():
		return "-"
	case ap.Port() == 0:
		return ap.Addr().String()
	}
	return ap.String()
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
		row(strings.ToUpper(string(f.Protocol)), flowEnd(f.Client), flowEnd(f.VIP), flowEnd(f.Backend), orDash(f.State), minutesSeconds(f.ExpiresIn), nat)
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
