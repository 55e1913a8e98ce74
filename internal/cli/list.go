package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/engine"
)

func listCmd(g *globals) *cobra.Command {
	var numeric bool
	var output string
	cmd := &cobra.Command{
		Use:   "list [-n] [-o table|json|yaml]",
		Short: "List services and backends with state and counters (like ipvsadm -L)",
		Long: `List services and backends. With a daemon running, the listing adds configured weights,
health and drains to what the kernel holds; without one, it is read from the kernel alone.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			services, err := listServices(cmd.Context(), g)
			if err != nil {
				return err
			}
			return emit(cmd.OutOrStdout(), output, services, func(w io.Writer) error {
				names := map[string]string{}
				if !numeric {
					names = serviceNames("/etc/services")
				}
				return printTable(w, services, names)
			})
		},
	}
	cmd.Flags().BoolVarP(&numeric, "numeric", "n", false, "numeric ports (no /etc/services names)")
	outputFlag(cmd, &output)
	return cmd
}

// listServices asks the daemon, or reads the kernel when no daemon runs.
func listServices(ctx context.Context, g *globals) ([]engine.ServiceView, error) {
	c, err := g.daemon(ctx)
	if err != nil {
		return nil, err
	}
	if c != nil {
		return c.Services(ctx)
	}
	kernel, err := everyStatus(ctx, g.logger())
	if err != nil {
		return nil, err
	}
	return kernelViews(kernel), nil
}

// kernelViews describes what the kernel holds in the daemon's terms; health and drains are unknown.
func kernelViews(kernel []datapath.ServiceStatus) []engine.ServiceView {
	out := []engine.ServiceView{}
	for _, k := range kernel {
		v := engine.ServiceView{
			Name: k.Name, Protocol: k.Protocol, VIP: k.VIP, Ports: k.Ports, Mode: k.Mode,
			Scheduler: k.Scheduler, Programmed: true, Slots: k.Slots,
		}
		for _, b := range k.Backends {
			v.Backends = append(v.Backends, engine.BackendView{
				ID: b.Address, Address: b.Address, Port: b.Port, Weight: b.Weight, ProgrammedWeight: b.Weight,
				Share: b.Share, Flows: b.Flows, ActiveFlows: b.ActiveFlows, Packets: b.Packets, Bytes: b.Bytes,
			})
		}
		out = append(out, v)
	}
	return out
}

// printTable writes the ipvsadm -L layout: a line per service, an indented line per backend.
func printTable(w io.Writer, services []engine.ServiceView, portNames map[string]string) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "Prot LocalAddress:Port\tScheduler\tMode\tSlots\t\t\t\t\t")
	fmt.Fprintln(tw, "  -> RemoteAddress:Port\tWeight\tState\tShare\tActiveConn\tConns\tInPkts\tInBytes\t")
	for _, s := range services {
		fmt.Fprintf(tw, "%s  %s\t%s\t%s\t%d\t\t\t\t\t\n", strings.ToUpper(s.Protocol), hostPort(s.VIP, portName(s.Ports, s.Protocol, portNames)), s.Scheduler, s.Mode, s.Slots)
		for _, b := range s.Backends {
			port := portName(s.Ports, s.Protocol, portNames) // the port the client used
			if b.Port != 0 {
				port = portName(strconv.Itoa(b.Port), s.Protocol, portNames)
			}
			state := b.State
			if state == "" {
				state = "-"
			}
			fmt.Fprintf(tw, "  -> %s\t%d\t%s\t%.1f%%\t%d\t%d\t%d\t%d\t\n", hostPort(b.Address, port), b.Weight, state, 100*b.Share, b.ActiveFlows, b.Flows, b.Packets, b.Bytes)
		}
	}
	return tw.Flush()
}

func hostPort(host, port string) string {
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return host + ":" + port
}

func portName(port, proto string, names map[string]string) string {
	if n, ok := names[port+"/"+proto]; ok {
		return n
	}
	return port
}

// serviceNames reads "port/proto -> name" from an /etc/services file; a missing file gives none.
func serviceNames(path string) map[string]string {
	names := map[string]string{}
	f, err := os.Open(path)
	if err != nil {
		return names
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(strings.SplitN(sc.Text(), "#", 2)[0])
		if len(fields) >= 2 {
			if _, seen := names[fields[1]]; !seen {
				names[fields[1]] = fields[0]
			}
		}
	}
	return names
}
