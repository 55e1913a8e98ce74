package labcli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicelb/sluice/internal/bench"
	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/lab"
)

// benchFleetKind names the fleet benchmark's lab after this process (lab.RunPrefix) unless
// --prefix is given, so that it never takes another run's lab.
const benchFleetKind = "sbf"

// benchFleetCmd is `sluice-lab bench fleet`: requests/s through 1..N Sluice nodes over ECMP, and a node failure.
func benchFleetCmd(f *benchFlags) *cobra.Command {
	o := bench.FleetOptions{}
	var output string
	cmd := &cobra.Command{
		Use:   "fleet",
		Short: "Requests/s through 1..N Sluice nodes behind a BIRD router (ECMP), and a node failure under load",
		Long: `Brings up a fleet lab (a BIRD router, --nodes balancer nodes, the backends) and, for each
datapath, runs sluice serve on every node with one config: BGP to the router and a DSR service on
the VIP. It measures bench lb's keepalive and per-conn workloads with wrk from the client through
1..N announcing nodes (the others drained with sluice node drain) and through the same router
without any balancer (direct), in interleaved rounds, and reports medians and ratios to one node
and to direct. Then it cuts one node off the network a third of the way into a run of new
connections and reports the router's reconvergence time, requests/s before and after, and the
failed requests.

Every namespace shares this machine's CPUs, so more nodes cannot add capacity here: the figures
show ECMP spreading and the cost of the balancer hop, not scaling. The lab (--prefix, default
sbf<pid>) is torn down at the end, also on failure or interrupt, unless --keep-lab.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.runInOwnLab(cmd, "fleet", benchFleetKind, output, o, func(ctx context.Context, env *bench.Env) (bench.Result, error) {
				return bench.RunFleet(ctx, env, o)
			})
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&o.Nodes, "nodes", 3, fmt.Sprintf("balancer nodes (2..%d); every count from 1 up is measured", lab.MaxBalancers))
	fl.StringSliceVar(&o.Datapaths, "datapath", config.Names(config.Datapaths), "datapaths to measure")
	fl.DurationVar(&o.Duration, "duration", 5*time.Second, "length of each wrk run (whole seconds, at least 1s)")
	fl.IntVar(&o.Rounds, "rounds", 3, "rounds; every node count and direct get every workload once per round")
	fl.StringSliceVar(&o.Workloads, "workloads", nil, "workloads to run: "+strings.Join(bench.FleetWorkloads, ", ")+" (default both)")
	fl.DurationVar(&o.Failover, "failover", 12*time.Second, "length of the failover run; a node is cut a third of the way in")
	fl.BoolVar(&o.KeepLab, "keep-lab", false, "leave the lab up afterwards")
	fl.StringVarP(&output, "output", "o", "table", "table or json (the JSON report on stdout)")
	return cmd
}
