package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/datapath/nft"
)

func listCmd(g *globals) *cobra.Command {
	var numeric bool
	var output string
	cmd := &cobra.Command{
		Use:   "list [-n] [-o table|json|yaml]",
		Short: "List programmed services and backends with counters (like ipvsadm -L)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "table" && output != "json" && output != "yaml" {
				return fmt.Errorf("-o: %q is not one of table, json, yaml", output)
			}
			dp, err := nft.New(g.logger())
			if err != nil {
				return err
			}
			services, err := dp.Status(cmd.Context())
			if err != nil {
				return err
			}
			if services == nil {
				services = []datapath.ServiceStatus{}
			}
			out := cmd.OutOrStdout()
			switch output {
			case "json":
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(services)
			case "yaml":
				return yaml.NewEncoder(out).Encode(services)
			}
			names := map[string]string{}
			if !numeric {
				names = serviceNames("/etc/services")
			}
			return printTable(out, services, names)
		},
	}
	cmd.Flags().BoolVarP(&numeric, "numeric", "n", false, "numeric ports (no /etc/services names)")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, json, yaml")
	return cmd
}

// printTable writes the ipvsadm -L layout: a line per service, an indented line per backend.
func printTable(w io.Writer, services []datapath.ServiceStatus, portNames map[string]string) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "Prot LocalAddress:Port\tScheduler\tMode\tSlots\t")
	fmt.Fprintln(tw, "  -> RemoteAddress:Port\tWeight\tShare\tConns/Pkts\tBytes")
	for _, s := range services {
		fmt.Fprintf(tw, "%s  %s\t%s\t%s\t%d\t\n", strings.ToUpper(s.Protocol), hostPort(s.VIP, portName(s.Ports, s.Protocol, portNames)), s.Scheduler, s.Mode, s.Slots)
		for _, b := range s.Backends {
			port := portName(s.Ports, s.Protocol, portNames) // the port the client used
			if b.Port != 0 {
				port = portName(strconv.Itoa(b.Port), s.Protocol, portNames)
			}
			fmt.Fprintf(tw, "  -> %s\t%d\t%.1f%%\t%d\t%d\n", hostPort(b.Address, port), b.Weight, 100*b.Share, b.Packets, b.Bytes)
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
