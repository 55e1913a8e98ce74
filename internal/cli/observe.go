package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicelb/sluice/internal/api"
	"github.com/sluicelb/sluice/internal/engine"
	"github.com/sluicelb/sluice/internal/plan"
)

func healthCmd(g *globals) *cobra.Command {
	return viewCmd(g, "health", "Show every health probe: state, streak, last latency and message", (*api.Client).Health, printHealth)
}

func printHealth(w io.Writer, probes []engine.HealthView) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tTYPE\tSTATE\tFOR\tSTREAK\tCHECKS\tLATENCY\tSERVICES\tLAST")
	for _, p := range probes {
		streak := fmt.Sprintf("%d ok", p.Successes)
		if p.Failures > 0 {
			streak = fmt.Sprintf("%d failed", p.Failures)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", p.Target, p.Type, p.State,
			time.Since(p.Since).Round(time.Second), streak, p.Checks, p.Latency.Round(10*time.Microsecond),
			strings.Join(p.Services, ","), p.Message)
	}
	return tw.Flush()
}

func planCmd(g *globals) *cobra.Command {
	var file string
	flags := changeFlags{dryRun: true}
	cmd := &cobra.Command{
		Use:   "plan -f FILE",
		Short: "Show what applying a config file would change, and the share of flows that would move",
		Long: `Plan shows what applying the file would change, changing nothing: services added (+), removed
(-) and changed (~), under each its settings and backends that differ and the share of its new
flows that would move to another backend; -o json or yaml for scripts. With a daemon it compares
with the daemon's running config; without one, with the plan the last sluice apply -f committed on
the nft datapath while its tables still hold it (no nftables transaction since), else with what the
kernel holds, read back as sluice list reads it (listeners, modes, schedulers, backends and
weights: fallback and health checks are not read back). -f - reads the file from standard input.

Exit status: 0 when nothing would change, 2 when something would, 1 on an error (like
terraform plan -detailed-exitcode).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			data, cfg, err := loadFile(cmd, file)
			if err != nil {
				return err
			}
			c, err := g.daemon(ctx)
			if err != nil {
				return err
			}
			var change plan.Change
			if c != nil {
				change, err = c.Plan(ctx, data)
			} else {
				change, err = g.oneShotPlan(ctx, cfg)
			}
			if err != nil {
				return err
			}
			return reportChange(cmd.OutOrStdout(), flags, change)
		},
	}
	fileFlag(cmd, &file)
	outputFlag(cmd, &flags.output)
	return cmd
}

func reloadCmd(g *globals) *cobra.Command {
	var flags changeFlags
	cmd := &cobra.Command{
		Use:   "reload",
		Short: "Make the daemon re-read its config file (like SIGHUP); a bad file is rejected",
		Long: `Reload makes the daemon read its config file again and waits until the datapath applied it.
A file that does not load or validate is rejected with its file:line errors (exit status 1), the
running config stays, and the daemon publishes a reload_failed event. systemctl reload runs it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.change(cmd, flags, func(ctx context.Context, c *api.Client) (plan.Change, error) {
				return c.Reload(ctx)
			})
		},
	}
	flags.register(cmd, false)
	return cmd
}

// completeServices completes service names from the daemon.
func (g *globals) completeServices(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return g.completion(cmd, func(s engine.ServiceView) []string { return []string{s.Name} })
}

// completeBackends completes a service name, then that service's backends.
func (g *globals) completeBackends(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	switch len(args) {
	case 0:
		return g.completeServices(cmd, args, "")
	case 1:
		return g.completion(cmd, func(s engine.ServiceView) []string {
			if s.Name != args[0] {
				return nil
			}
			var ids []string
			for _, b := range s.Backends {
				ids = append(ids, b.ID)
			}
			return ids
		})
	}
	return nil, cobra.ShellCompDirectiveNoFileComp
}

func (g *globals) completion(cmd *cobra.Command, pick func(engine.ServiceView) []string) ([]string, cobra.ShellCompDirective) {
	var out []string
	if services, err := listServices(cmd.Context(), g); err == nil {
		for _, s := range services {
			out = append(out, pick(s)...)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}
