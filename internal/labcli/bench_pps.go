package labcli

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicelb/sluice/internal/bench"
)

// benchPPSCmd is `sluice-lab bench pps`: forwarded packets per second, drop share and kernel CPU
// through every candidate, small UDP packets and TCP SYNs to one VIP with 100 reals.
func benchPPSCmd(f *benchFlags) *cobra.Command {
	o := bench.PPSOptions{}
	var installPeers bool
	cmd := &cobra.Command{
		Use:   "pps",
		Short: "Forwarded packets/s per candidate and per core, one VIP and 100 reals, interleaved rounds, medians",
		Long: `Brings up the lab, puts 100 reals (addresses) on its backend namespaces, which drop what
arrives at their ingress, and has trafgen (Debian netsniff-ng) in the client namespace, on CPU 0,
send 60-byte frames as fast as it can for --duration: UDP from random source ports (udp), or TCP
SYNs from random sources (syn, every packet a new flow), to the VIP, or for the direct baseline
to the reals in turn. Each veth hands a frame on within the send, so the balancer forwards it on
CPU 0 too. It reports the packets sent and forwarded per second, the share dropped, CPU 0's
kernel time (system+irq+softirq: the balancer's, and the generator's, switch's and backends'
share, the same for every candidate) and forwarded packets per second per core, with ratios to
direct.
Candidates: ` + strings.Join(bench.PPSCandidateNames(), ", ") + ` (peers when installed;
nft-nat-uncounted, nft nat with nft.packet_counters false, and nft-nat-lean, with every nft
opt-out, only when named).

It brings up its own lab (--prefix) and tears it down at the end, also on failure or interrupt.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.run(cmd, "pps", o, func(ctx context.Context, env *bench.Env) (bench.Result, error) {
				if err := installPeersIf(ctx, env, installPeers); err != nil {
					return nil, err
				}
				return bench.RunPPS(ctx, env, o)
			})
		},
	}
	cmd.Flags().DurationVar(&o.Duration, "duration", 5*time.Second, "length of each send (at least 1s)")
	cmd.Flags().IntVar(&o.Rounds, "rounds", 3, "rounds; every candidate gets every workload once per round")
	cmd.Flags().StringSliceVar(&o.Workloads, "workloads", nil, "workloads to send: udp, syn (default both)")
	cmd.Flags().StringSliceVar(&o.Candidates, "candidates", nil, "candidates to measure (default all installed; direct is always measured)")
	cmd.Flags().StringVar((*string)(&o.Switch), "switch", string(bench.SwitchStack),
		"how the lab's switch and hosts take frames, for every candidate: stack (bridge) or xdp (forward by MAC at XDP)")
	cmd.Flags().BoolVar(&o.Steer, "steer", false,
		"give the balancer CPU 1 alone (a threaded NAPI poller) and send with Sluice's own sender on CPU 0: Mpps per core of the balancer itself")
	cmd.Flags().StringVar(&o.Against, "against", "",
		"a candidate of the run: also give every other candidate's forwarded packets/s per core over its own round by round, with the median of those ratios and the range that holds it with 95% confidence")
	cmd.Flags().BoolVar(&o.KeepLab, "keep-lab", false, "leave the lab up afterwards (its backends still drop port 80)")
	cmd.Flags().BoolVar(&installPeers, "install-peers", false, "install the peers (nftlb) from Debian packages first")
	return cmd
}
