package labcli

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicelb/sluice/internal/bench"
)

func benchLBCmd(f *benchFlags) *cobra.Command {
	o := bench.LBOptions{}
	var svgPath string
	var installPeers bool
	cmd := &cobra.Command{
		Use:   "lb",
		Short: "Requests/s and latency through every balancer vs direct, interleaved rounds, medians",
		Long: `Brings up the lab and runs the same wrk load through every candidate in turn: direct (the
baseline: client to backends routed through the balancer namespace, no balancing), every Sluice
datapath in every mode, and the peers installed (the bare nft-dnat/nft-masq/nft-fwd and
iptables-dnat/iptables-legacy-dnat, nftlb dnat/snat/dsr, HAProxy TCP, nginx stream).
Only when named in --candidates: nft-nat-uncounted and nft-fullnat-uncounted, the nft datapath
with nft.packet_counters false (what per-packet counting costs), and nft-nat-lean and
nft-fullnat-lean, with every nft opt-out (nft.half_open_timeouts false too); and the nat and
fullnat candidates run by a daemon (sluice serve), with replication on (nft-nat-sync, ...: a
sync section to a backend's address, where nothing listens) and off (nft-nat-served, ...): what
replicating costs.
Workloads: ` + workloadList() + `.

It brings up its own lab (--prefix) and tears it down at the end, also on failure or interrupt.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.run(cmd, "lb", o, func(ctx context.Context, env *bench.Env) (bench.Result, error) {
				if err := installPeersIf(ctx, env, installPeers); err != nil {
					return nil, err
				}
				res, err := bench.RunLB(ctx, env, o)
				if err != nil {
					return nil, err
				}
				if svgPath != "" {
					if err := os.WriteFile(svgPath, []byte(res.SVG()), 0o644); err != nil {
						return nil, err
					}
				}
				return res, nil
			})
		},
	}
	cmd.Flags().DurationVar(&o.Duration, "duration", 5*time.Second, "length of each load run (whole seconds, at least 1s)")
	cmd.Flags().IntVar(&o.Rounds, "rounds", 3, "rounds; every candidate gets every workload once per round")
	cmd.Flags().IntVar(&o.Rate, "rate", 2000, "offered requests/s of the latency workload")
	cmd.Flags().StringSliceVar(&o.Workloads, "workloads", nil, "workloads to run (default all)")
	cmd.Flags().StringSliceVar(&o.Candidates, "candidates", nil, "candidates to measure (default all installed; direct is always measured)")
	cmd.Flags().StringVar((*string)(&o.Switch), "switch", string(bench.SwitchStack),
		"how the lab's switch and hosts take frames, for every candidate: stack (bridge) or xdp (forward by MAC at XDP)")
	cmd.Flags().BoolVar(&o.KeepLab, "keep-lab", false, "leave the lab up afterwards")
	cmd.Flags().BoolVar(&o.Profile, "profile", false,
		"sample every CPU with perf during each run and report the packet path's kernel time in ns per request, by feature (rules, maps, hash, counters, ct-set, dynset, nat, conntrack, bpf, decap, sync), with the whole machine's CPU per request and its ratio to the workload's first candidate; --json also lists the costliest symbols and the feature each is charged to")
	cmd.Flags().StringVar(&o.Against, "against", "",
		"a candidate of the run: also give every other candidate's requests/s over its own round by round, with the median of those ratios and the range that holds it with 95% confidence")
	cmd.Flags().StringVar(&svgPath, "svg", "", "also draw the results as an SVG chart to this file")
	cmd.Flags().BoolVar(&installPeers, "install-peers", false, "install the peers (nftlb, haproxy, nginx stream) from Debian packages first")
	return cmd
}

func workloadList() string {
	var s string
	for i, w := range bench.Workloads {
		if i > 0 {
			s += "; "
		}
		s += fmt.Sprintf("%s (%s)", w.Name, w.Description)
	}
	return s
}
