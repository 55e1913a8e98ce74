package cli

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicelb/sluice/internal/boundedread"
	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/engine"
)

func listCmd(g *globals) *cobra.Command {
	var opts listOptions
	cmd := &cobra.Command{
		Use:   "list [SERVICE|VIP:PORT] [-n] [-o table|wide|json|yaml]",
		Short: "List services and backends with state and counters (like ipvsadm -L)",
		Long: `List services and backends, or the one service named or listening on VIP:PORT. With a daemon
running, the listing adds configured weights, health and drains to what the kernel holds;
without one, it is read from the kernel alone. -o wide adds the fallback, the programmed weight
and the health.`,
		Example: `  sluice list
  sluice list web -o wide
  sluice list 10.91.9.100:80`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: g.completeServices,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runList(cmd, g, args, opts)
		},
	}
	opts.flags(cmd)
	return cmd
}

// serviceListCmd is `sluice service list`, the listing under the service command.
func serviceListCmd(g *globals) *cobra.Command {
	cmd := listCmd(g)
	cmd.Use = "list [SERVICE|VIP:PORT] [-n] [-o table|wide|json|yaml]"
	cmd.Short = "List services and backends (as sluice list)"
	return cmd
}

// backendListCmd is `sluice backend list SERVICE`: that service and its backends.
func backendListCmd(g *globals) *cobra.Command {
	var opts listOptions
	cmd := &cobra.Command{
		Use:               "list SERVICE [-n] [-o table|wide|json|yaml]",
		Short:             "List a service's backends (as sluice list SERVICE)",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completeServices,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runList(cmd, g, args, opts)
		},
	}
	opts.flags(cmd)
	return cmd
}

// listOptions are the flags of the listing commands.
type listOptions struct {
	numeric  bool
	output   string
	rate     bool          // --rate: per-second rates instead of the counters
	interval time.Duration // between the two readings of --rate
}

func (o *listOptions) flags(cmd *cobra.Command) {
	cmd.Flags().BoolVarP(&o.numeric, "numeric", "n", false, "numeric ports (no /etc/services names)")
	cmd.Flags().StringVarP(&o.output, "output", "o", "table", "output format: table, wide, json, yaml, ipvsadm (ipvsadm -Ln's layout)")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "wide", "json", "yaml", "ipvsadm"}, cobra.ShellCompDirectiveNoFileComp))
	cmd.Flags().BoolVar(&o.rate, "rate", false, "per-second rates of new connections, packets and bytes (like ipvsadm --rate)")
	cmd.Flags().DurationVar(&o.interval, "interval", time.Second, "--rate: the time between the two readings (100ms..1m)")
}

// runList prints the services, or the one args names.
func runList(cmd *cobra.Command, g *globals, args []string, o listOptions) error {
	if o.rate {
		return runRate(cmd, g, args, o)
	}
	services, err := listServices(cmd.Context(), g)
	if err != nil {
		return err
	}
	if len(args) == 1 {
		if services, err = filterServices(services, args[0]); err != nil {
			return err
		}
	}
	names := map[string]string{}
	if !o.numeric && (o.output == "table" || o.output == "wide") {
		names = serviceNames("/etc/services")
	}
	switch o.output {
	case "wide":
		return printTable(cmd.OutOrStdout(), services, names, true)
	case "ipvsadm":
		return printIPVS(cmd.OutOrStdout(), services)
	}
	return emit(cmd.OutOrStdout(), o.output, services, func(w io.Writer) error {
		return printTable(w, services, names, false)
	})
}

// filterServices keeps the service named by, or listening on, what (a name or VIP:PORT).
func filterServices(services []engine.ServiceView, what string) ([]engine.ServiceView, error) {
	at, atErr := netip.ParseAddrPort(what)
	out := []engine.ServiceView{}
	for _, s := range services {
		if s.Name == what || atErr == nil && listensOn(s, at) {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no service is named %q or listens on it", what)
	}
	return out, nil
}

// listensOn tells whether a service's VIP and ports take at.
func listensOn(s engine.ServiceView, at netip.AddrPort) bool {
	if s.VIP.Addr != at.Addr().Unmap() {
		return false
	}
	ports, err := config.ParsePortList(s.Ports)
	return err == nil && ports.Contains(int(at.Port()))
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
			Name: k.Name, Protocol: k.Protocol, VIP: config.IPOf(k.VIP), Ports: k.Ports, Mode: k.Mode,
			Scheduler: k.Scheduler, Programmed: true, Slots: k.Slots, Refused: k.Refused,
			Unforwarded: k.Unforwarded, SYNCookies: k.SYNCookies,
		}
		for _, b := range k.Backends {
			bv := engine.BackendView{
				ID: engine.BackendID(b.Address, b.Port), Address: b.Address, Port: b.Port, Weight: b.Weight, ProgrammedWeight: b.Weight,
				Share: b.Share, Flows: b.Flows, ActiveFlows: b.ActiveFlows, Packets: b.Packets, Bytes: b.Bytes, Connections: b.Connections,
			}
			if b.Overloaded { // the one state the kernel knows without the daemon
				bv.State = "overloaded"
			}
			v.Backends = append(v.Backends, bv)
		}
		out = append(out, v)
	}
	return out
}

// optionalCount is a count, or "-" for one the datapath does not keep.
func optionalCount(n *uint64) string {
	if n == nil {
		return "-"
	}
	return strconv.FormatUint(*n, 10)
}

// printTable writes the ipvsadm -L layout: a line per service, an indented line per backend, then
// a "!!" line per service with packets the datapath could not forward; wide adds the fallback, the
// programmed weight and the health. No line ends in a space.
func printTable(w io.Writer, services []engine.ServiceView, portNames map[string]string, wide bool) error {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 8, 2, ' ', 0)
	row := func(cells ...string) { fmt.Fprintln(tw, strings.Join(cells, "\t")) }
	var notes []string // below the table, not to upset its columns
	if wide {
		row("Prot LocalAddress:Port", "Name", "Scheduler", "Mode", "Fallback", "Slots", "", "", "", "", "")
		row("  -> RemoteAddress:Port", "Weight", "Programmed", "Health", "State", "Share", "ActiveConn", "Conns", "InPkts", "InBytes", "")
	} else {
		row("Prot LocalAddress:Port", "Name", "Scheduler", "Mode", "Slots", "", "", "", "")
		row("  -> RemoteAddress:Port", "Weight", "State", "Share", "ActiveConn", "Conns", "InPkts", "InBytes", "")
	}
	for _, s := range services {
		addr := strings.ToUpper(string(s.Protocol)) + "  " + hostPort(s.VIP.String(), portName(s.Ports, string(s.Protocol), portNames))
		if wide {
			row(addr, s.Name, string(s.Scheduler), string(s.Mode), orDash(string(s.Fallback)), strconv.Itoa(s.Slots), "", "", "", "", "")
		} else {
			row(addr, s.Name, string(s.Scheduler), string(s.Mode), strconv.Itoa(s.Slots), "", "", "", "")
		}
		for _, b := range s.Backends {
			port := portName(s.Ports, string(s.Protocol), portNames) // the port the client used
			if b.Port != 0 {
				port = portName(strconv.Itoa(b.Port), string(s.Protocol), portNames)
			}
			addr := "  -> " + hostPort(b.Address, port)
			share := fmt.Sprintf("%.1f%%", 100*b.Share)
			counters := []string{strconv.FormatUint(b.ActiveFlows, 10), strconv.FormatUint(b.Flows, 10), optionalCount(b.Packets), optionalCount(b.Bytes), ""}
			if wide {
				row(append([]string{addr, strconv.Itoa(b.Weight), strconv.Itoa(b.ProgrammedWeight), orDash(b.Health), orDash(b.State), share}, counters...)...)
			} else {
				row(append([]string{addr, strconv.Itoa(b.Weight), orDash(b.State), share}, counters...)...)
			}
		}
		if s.Unforwarded.Total() > 0 {
			notes = append(notes, fmt.Sprintf("!! %s: dropped, not forwarded: %s\n", s.Name, s.Unforwarded))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	buf.WriteString(strings.Join(notes, ""))
	return writeTrimmed(w, buf.String())
}

// writeTrimmed writes text with the spaces tabwriter pads empty last cells with cut from each line.
func writeTrimmed(w io.Writer, text string) error {
	var out strings.Builder
	for _, line := range strings.SplitAfter(text, "\n") {
		body, nl := strings.CutSuffix(line, "\n")
		out.WriteString(strings.TrimRight(body, " "))
		if nl {
			out.WriteString("\n")
		}
	}
	_, err := io.WriteString(w, out.String())
	return err
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

// serviceNames reads "port/proto -> name" from an /etc/services file; a missing file, or one that
// is not a regular file of at most 1 MiB (the usual one is 13 KiB), gives none.
func serviceNames(path string) map[string]string {
	const servicesBytes = 1 << 20
	names := map[string]string{}
	data, err := boundedread.File(path, servicesBytes)
	if err != nil {
		return names
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
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
