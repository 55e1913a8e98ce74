package labcli

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicelb/sluice/internal/bench"
)

// benchNetCmd is `sluice-lab bench net`: qperf-like TCP bandwidth and latency between the lab's
// client and backend b1, direct, through Sluice and over a VXLAN overlay.
func benchNetCmd(f *benchFlags) *cobra.Command {
	opt := bench.NetOptions{}
	cmd := &cobra.Command{
		Use:   "net",
		Short: "TCP bandwidth and latency from the lab's client to a backend: direct, through Sluice, over VXLAN",
		Long: `Measures one TCP stream's bandwidth and 1-byte ping-pong latency from the lab's client to
backend b1 over three paths: direct (routed through the balancer namespace, no rules), through
Sluice (nft nat mode, the VIP with b1 as the only backend) and over a VXLAN overlay. Each round
measures every path once, in balanced orders. The results are medians over the rounds, each
path's median over direct's (ratio), and the lowest and highest of path / direct within one round
(per round), so you can tell whether the network or the balancer limits, and how steadily.

It brings up its own lab (--prefix) and tears it down at the end, also on failure or interrupt.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.run(cmd, "net", opt, func(ctx context.Context, env *bench.Env) (bench.Result, error) {
				return bench.RunNet(ctx, env, opt)
			})
		},
	}
	cmd.Flags().DurationVar(&opt.Duration, "duration", 5*time.Second, "length of each bandwidth and of each latency measurement")
	cmd.Flags().IntVar(&opt.Rounds, "rounds", 3, "interleaved rounds; the results are their medians")
	cmd.Flags().BoolVar(&opt.KeepLab, "keep-lab", false, "leave the lab up afterwards")
	return cmd
}
