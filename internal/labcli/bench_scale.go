package labcli

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicelb/sluice/internal/bench"
	"github.com/sluicelb/sluice/internal/config"
)

// benchScaleCmd is `sluice-lab bench scale`: what a change and a packet cost as the config grows.
func benchScaleCmd(f *benchFlags) *cobra.Command {
	o := bench.ScaleOptions{}
	cmd := &cobra.Command{
		Use:   "scale",
		Short: "Apply time, one-backend change latency, memory and requests/s as the config grows",
		Long: `For every datapath and every size (--services, each with --backends-per-service backends) it
measures, from an empty balancer: the time to apply the whole config with sluice apply; the time
to add one backend to one service, with sluice apply -f and through a running daemon (sluice
backend add, until the daemon has applied it), medians of --reps; to add one service of as many
backends with sluice apply -f and to remove it again, medians of --reps; the daemon's start (until its
first apply is done); the daemon's resident memory and
the kernel's memory growth (approximate); and requests/s of wrk keep-alive runs through the one
service that has real backends (median of --rounds), as a ratio to the smallest size. The cost of one change should not
grow with the size of the rest.

Each step is bounded by --limit and stopped when the machine's available memory falls below a
quarter: the size is then reported as not reached, and the larger sizes are skipped. It brings up its own lab (--prefix) and tears it down at the end,
also on failure or interrupt.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.run(cmd, "scale", o, func(ctx context.Context, env *bench.Env) (bench.Result, error) {
				return bench.RunScale(ctx, env, o)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&o.Datapaths, "datapath", config.Names(config.Datapaths), "datapaths to measure")
	fl.IntSliceVar(&o.Services, "services", []int{1, 100, 1000, 10000}, "sizes to measure, in services")
	fl.IntVar(&o.BackendsPerService, "backends-per-service", 10, "backends of every service")
	fl.IntVar(&o.Reps, "reps", 3, "one-backend changes per size and way (median reported)")
	fl.DurationVar(&o.Limit, "limit", 2*time.Minute, "bound of each step; a size past it is reported as not reached")
	fl.DurationVar(&o.Load, "duration", 3*time.Second, "length of each wrk run (whole seconds)")
	fl.IntVar(&o.Rounds, "rounds", 3, "wrk runs per size (median reported)")
	return cmd
}
