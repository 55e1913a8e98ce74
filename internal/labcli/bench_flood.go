package labcli

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicelb/sluice/internal/bench"
)

// benchFloodCmd is `sluice-lab bench flood`: legitimate per-connection load through each candidate
// without and under a SYN flood from forged sources, and what the flood left at the backends.
func benchFloodCmd(f *benchFlags) *cobra.Command {
	o := bench.FloodOptions{}
	var installPeers bool
	cmd := &cobra.Command{
		Use:   "flood",
		Short: "Legitimate requests/s under a SYN flood vs without, and the SYNs that reached the backends",
		Long: `Brings up the lab with an attacker namespace linked to the balancer. Each round, every
candidate gets wrk from the client (one request per connection, paced at --rate connections/s,
or as fast as answered with --rate 0) for --duration without a flood, then again while the attacker floods the VIP with SYNs from random forged sources (hping3 --flood
--rand-source, killed after the load). It reports the legitimate requests/s under the flood as a
share of without, the flood's rate, and at the backends: the forged SYNs that reached them, their
half-open connections from forged sources, and nstat's listen drops, overflows and SYN cookies.
Candidates: ` + strings.Join(bench.FloodCandidateNames(), ", ") + ` (peers when installed).

It brings up its own lab (--prefix) and tears it down at the end, also on failure or interrupt.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.run(cmd, "flood", o, func(ctx context.Context, env *bench.Env) (bench.Result, error) {
				if err := installPeersIf(ctx, env, installPeers); err != nil {
					return nil, err
				}
				return bench.RunFlood(ctx, env, o)
			})
		},
	}
	cmd.Flags().DurationVar(&o.Duration, "duration", 5*time.Second, "length of each load run, with and without the flood (whole seconds, at least 1s)")
	cmd.Flags().IntVar(&o.Rounds, "rounds", 3, "rounds; every candidate gets both runs once per round")
	cmd.Flags().IntVar(&o.Rate, "rate", 1000, "offered legitimate connections/s, one request each (0: closed-loop, as fast as answered)")
	cmd.Flags().StringSliceVar(&o.Candidates, "candidates", nil, "candidates to measure (default all installed)")
	cmd.Flags().BoolVar(&o.KeepLab, "keep-lab", false, "leave the lab up afterwards")
	cmd.Flags().BoolVar(&installPeers, "install-peers", false, "install the peers (nftlb, haproxy) from Debian packages first")
	return cmd
}
