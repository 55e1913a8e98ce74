package labcli

import (
	"context"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluicelb/sluice/internal/bench"
	"github.com/sluicelb/sluice/internal/config"
)

// benchFailoverKind names the failover benchmark's lab after this process (lab.RunPrefix) unless
// --prefix is given, so that it never takes another run's lab.
const benchFailoverKind = "slfo"

// benchFailoverCmd is `sluice-lab bench failover`: broken connections and reconvergence per event of
// a keepalived pair, per datapath and mode.
func benchFailoverCmd(f *benchFlags) *cobra.Command {
	o := bench.FailoverOptions{}
	var output string
	cmd := &cobra.Command{
		Use:   "failover",
		Short: "Broken connections and reconvergence time per failover event of a keepalived pair or a BGP fleet, per datapath and mode",
		Long: `Brings up a fleet lab (a BIRD router, two balancer nodes, the backends) and, for each datapath
and mode, runs an active/backup pair as docs/ha.md builds it: sluice serve on both nodes with a
sync section, keepalived (VRRPv3, a front and a backends'-side address in one sync group, the
track script sluice node check). Through each event it runs --conns long-lived keep-alive
connections, each making a request every 100 ms, and --new-rate new connections a second, and
counts the broken ones: a long-lived connection reset, failed or not answered within 5 s, or a
new connection that failed. It reports, per event and datapath-mode, broken/total and the
reconvergence time (from the event until the address moved, or until a restarted daemon is
ready and master again).

Pair events (the default): ` + strings.Join(bench.FailoverEvents, ", ") + `. The pair is
restored between events (node 1 master).

Fleet events (asked for by name): ` + strings.Join(bench.FleetFailoverEvents, ", ") + `.
They run in a BGP/ECMP fleet (docs/scale-out.md): the same two nodes announce the VIP to the
router (BFD 100 ms x 3 on its sessions), each with a sync section, fullnat translating to a
source of each node's own listed in bgp.fullnat_sources; each event befalls node 2, and the
fleet has reconverged when the router's routes are those of the nodes up. nat behind ECMP is
unsupported and its fleet cells say so instead of a number. For example:

  sluice-lab bench failover --modes dsr,fullnat --events ` + strings.Join(bench.FleetFailoverEvents, ",") + `

The lab (--prefix, default slfo<pid>) is torn down at the end, also on failure or interrupt,
unless --keep-lab.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.runInOwnLab(cmd, "failover", benchFailoverKind, output, o, func(ctx context.Context, env *bench.Env) (bench.Result, error) {
				return bench.RunFailover(ctx, env, o)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&o.Datapaths, "datapath", config.Names(config.Datapaths), "datapaths to measure")
	fl.StringSliceVar(&o.Modes, "modes", config.Names(bench.FailoverModes), "service modes to measure")
	fl.StringSliceVar(&o.Events, "events", bench.FailoverEvents, "events to run (the table's rows): the pair's, and the fleet's by name (fleet-...)")
	fl.IntVar(&o.Conns, "conns", 24, "long-lived connections, each making a request every 100 ms")
	fl.IntVar(&o.NewRate, "new-rate", 20, "new connections a second (one request each) through every event")
	fl.BoolVar(&o.KeepLab, "keep-lab", false, "leave the lab up afterwards")
	fl.StringVarP(&output, "output", "o", "table", "table or json (the JSON report on stdout)")
	return cmd
}
