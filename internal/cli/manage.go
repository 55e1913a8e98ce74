package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicelb/sluice/internal/api"
	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/engine"
	"github.com/sluicelb/sluice/internal/plan"
)

func serviceCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "service", Short: "Add or remove services on the running daemon"}
	var s config.Service
	var backends []string
	var addFlags, rmFlags changeFlags
	add := &cobra.Command{
		Use:   "add NAME VIP:PORT [--backend ADDR[:PORT][@WEIGHT]]...",
		Short: "Add a service (like ipvsadm -A)",
		Example: `  sluice service add web 10.0.0.1:80 --backend 10.0.1.1 --backend 10.0.1.2@2
  sluice service add dns [fd00::53]:53 --protocol udp --scheduler rr --backend fd00::1`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			s.Name = args[0]
			vip, ports, err := splitListener(args[1])
			if err != nil {
				return fmt.Errorf("VIP:PORT: %w", err)
			}
			s.VIP = vip
			s.SetPorts(ports)
			for _, spec := range backends {
				b, err := parseBackendSpec(spec)
				if err != nil {
					return fmt.Errorf("--backend %s: %w", spec, err)
				}
				s.Backends = append(s.Backends, b)
			}
			return g.change(cmd, addFlags, func(ctx context.Context, c *api.Client) (plan.Change, error) {
				res, err := c.AddService(ctx, s, addFlags.dryRun)
				return res.Change, err
			})
		},
	}
	f := add.Flags()
	f.StringVar((*string)(&s.Protocol), "protocol", "", "tcp (default) or udp")
	f.StringVar((*string)(&s.Mode), "mode", "", "nat (default), fullnat or dsr")
	f.StringVar((*string)(&s.Scheduler), "scheduler", "", "maglev (default), rr, wrr, hash or random")
	f.StringVar((*string)(&s.Fallback), "fallback", "", "drop (default) or reject when no backend takes new flows")
	f.StringArrayVar(&backends, "backend", nil, "a backend ADDR[:PORT][@WEIGHT]; repeat for more")
	addFlags.register(add, true)
	completeEnum(add, "protocol", config.Names(config.Protocols))
	completeEnum(add, "mode", config.Names(config.Modes))
	completeEnum(add, "scheduler", config.Names(config.Schedulers))
	completeEnum(add, "fallback", config.Names([]config.Fallback{config.FallbackDrop, config.FallbackReject}))

	rm := &cobra.Command{
		Use:               "rm NAME",
		Short:             "Remove a service (like ipvsadm -D)",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completeServices,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.change(cmd, rmFlags, func(ctx context.Context, c *api.Client) (plan.Change, error) {
				return c.RemoveService(ctx, args[0], rmFlags.dryRun)
			})
		},
	}
	rmFlags.register(rm, true)
	cmd.AddCommand(add, rm, serviceListCmd(g))
	return cmd
}

func backendCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "backend", Short: "Add, remove, weight or drain backends on the running daemon"}
	var weight int
	var addFlags, rmFlags, weightFlags changeFlags
	add := &cobra.Command{
		Use:               "add SERVICE ADDR[:PORT]",
		Short:             "Add a backend to a service (like ipvsadm -a)",
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: g.completeServices,
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := parseBackendSpec(args[1])
			if err != nil {
				return fmt.Errorf("ADDR[:PORT]: %w", err)
			}
			if cmd.Flags().Changed("weight") {
				b.Weight = &weight
			}
			return g.change(cmd, addFlags, func(ctx context.Context, c *api.Client) (plan.Change, error) {
				res, err := c.AddBackend(ctx, args[0], b, addFlags.dryRun)
				return res.Change, err
			})
		},
	}
	add.Flags().IntVarP(&weight, "weight", "w", 1, "weight (0-1000)")
	addFlags.register(add, true)

	rm := &cobra.Command{
		Use:               "rm SERVICE ADDR[:PORT]",
		Short:             "Remove a backend from a service (like ipvsadm -d); prefer drain first",
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: g.completeBackends,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.change(cmd, rmFlags, func(ctx context.Context, c *api.Client) (plan.Change, error) {
				return c.RemoveBackend(ctx, args[0], args[1], rmFlags.dryRun)
			})
		},
	}
	rmFlags.register(rm, true)

	setWeight := &cobra.Command{
		Use:               "weight SERVICE ADDR[:PORT] WEIGHT",
		Short:             "Set a backend's weight (0: no new flows, existing ones stay)",
		Args:              cobra.ExactArgs(3),
		ValidArgsFunction: g.completeBackends,
		RunE: func(cmd *cobra.Command, args []string) error {
			w, err := strconv.Atoi(args[2])
			if err != nil {
				return fmt.Errorf("WEIGHT: %q is not a number", args[2])
			}
			return g.change(cmd, weightFlags, func(ctx context.Context, c *api.Client) (plan.Change, error) {
				res, err := c.SetWeight(ctx, args[0], args[1], w, weightFlags.dryRun)
				return res.Change, err
			})
		},
	}
	weightFlags.register(setWeight, true)
	cmd.AddCommand(add, rm, setWeight, drainCmd(g), backendListCmd(g))
	return cmd
}

func drainCmd(g *globals) *cobra.Command {
	var timeout time.Duration
	var noWait bool
	dry := changeFlags{output: "table"}
	cmd := &cobra.Command{
		Use:   "drain SERVICE ADDR[:PORT] [--timeout 5m]",
		Short: "Take a backend out of new flows and follow its active flows down to drained",
		Long: `Drain sets the backend's weight to 0: it takes no new flows and keeps its established ones.
The command then follows the backend's active flows until none is left or the timeout passes, when
the daemon emits a "drained" event. With --no-wait it returns at once, before the datapath applied
weight 0 (see sluice events). --dry-run shows what weight 0 would change, changing nothing.`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: g.completeBackends,
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout <= 0 || timeout > api.MaxDrainTimeout {
				return fmt.Errorf("--timeout: %s is not a duration above 0 and at most %s (like 5m)", timeout, api.MaxDrainTimeout)
			}
			c, err := g.requireDaemon(cmd.Context())
			if err != nil {
				return err
			}
			c.NoWait = noWait
			out := cmd.OutOrStdout()
			ctx := cmd.Context()
			if dry.dryRun {
				_, change, err := c.Drain(ctx, args[0], args[1], timeout, true)
				if err != nil {
					return err
				}
				return reportChange(out, dry, change)
			}
			d, _, err := c.Drain(ctx, args[0], args[1], timeout, false)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "draining %s of %s: weight %d -> 0, %d active flows, timeout %s\n",
				d.Backend, d.Service, d.PreviousWeight, d.ActiveFlows, d.Deadline.Sub(d.Started).Round(time.Second))
			if noWait {
				return nil
			}
			last := d.ActiveFlows
			for d.State == engine.DrainDraining {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(time.Second):
				}
				if d, err = findDrain(ctx, c, d.Service, d.Backend); err != nil {
					return err
				}
				if d.ActiveFlows != last {
					fmt.Fprintf(out, "  %d active flows\n", d.ActiveFlows)
					last = d.ActiveFlows
				}
			}
			fmt.Fprintf(out, "drained: %s\n", d.Reason)
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", engine.DefaultDrainTimeout, "give up waiting for flows to end after this long")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "return once the drain has started")
	cmd.Flags().BoolVar(&dry.dryRun, "dry-run", false, "show what weight 0 would change (and the share of flows that would move) without changing it; exit status 2 when something would")
	return cmd
}

func findDrain(ctx context.Context, c *api.Client, service, backend string) (engine.DrainView, error) {
	drains, err := c.Drains(ctx)
	if err != nil {
		return engine.DrainView{}, err
	}
	for _, d := range drains {
		if d.Service == service && d.Backend == backend {
			return d, nil
		}
	}
	return engine.DrainView{}, fmt.Errorf("the drain of %s %s was canceled (the backend was removed or weighted again)", service, backend)
}

// splitListener parses "10.0.0.1:80", "[fd00::1]:443" or "10.0.0.1:8000-8010".
func splitListener(s string) (config.IP, config.PortList, error) {
	i := strings.LastIndex(s, ":")
	if i < 0 {
		return config.IP{}, nil, fmt.Errorf("%q has no port", s)
	}
	host := config.IPOf(strings.Trim(s[:i], "[]")).Canonical()
	ports, err := config.ParsePortList(s[i+1:])
	return host, ports, err
}

// parseBackendSpec parses ADDR[:PORT][@WEIGHT].
func parseBackendSpec(spec string) (config.Backend, error) {
	addrPart, weightPart, weighted := strings.Cut(spec, "@")
	var b config.Backend
	if weighted {
		w, err := strconv.Atoi(weightPart)
		if err != nil {
			return b, fmt.Errorf("weight %q is not a number", weightPart)
		}
		b.Weight = &w
	}
	at, _, err := config.ParseBackendRef(addrPart)
	if err != nil {
		return b, err
	}
	b.Address, b.Port = config.IPFrom(at.Addr()), int(at.Port())
	return b, nil
}

func completeEnum(cmd *cobra.Command, flag string, values []string) {
	_ = cmd.RegisterFlagCompletionFunc(flag, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
}
