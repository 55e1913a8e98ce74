package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluicelb/sluice/internal/boundedread"
	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/engine"
	"github.com/sluicelb/sluice/internal/plan"
)

func validateCmd() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "validate -f FILE",
		Short: "Check a config file without touching the kernel",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, cfg, err := loadFile(cmd, file)
			if err != nil {
				return err
			}
			p, err := plan.Build(cfg, nil)
			if err != nil {
				return err
			}
			warn(cmd.ErrOrStderr(), file, cfg)
			fmt.Fprintf(cmd.OutOrStdout(), "%s: ok, %d services\n", fileName(file), len(p.Services))
			return nil
		},
	}
	fileFlag(cmd, &file)
	return cmd
}

func applyCmd(g *globals) *cobra.Command {
	var file string
	var flags changeFlags
	cmd := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Make a config file the running state (through the daemon when one runs)",
		Long: `Apply validates the file here, then hands it to the running daemon, which replaces its running
config and reconciles; it returns once the datapath applied the file (--no-wait: at once). Without a daemon
it programs the datapath directly and exits; it keeps what it applied beside the state file
(last-apply.gob), so that the next apply changes only the services that differ without reading the
tables or maps back, as long as nothing changed them in between (on nft no nftables transaction, on
ebpf no apply of another process: a token in the pinned map apply_token tells). Either way only the difference is
changed, and printed as a diff (see sluice plan; -o json): applying the same file again prints
"no changes". -f - reads the file from standard input.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			data, cfg, err := loadFile(cmd, file)
			if err != nil {
				return err
			}
			warn(cmd.ErrOrStderr(), fileName(file), cfg)
			c, err := g.daemon(ctx)
			if err != nil {
				return err
			}
			if c != nil {
				c.NoWait = flags.noWait
				change, err := c.PutConfig(ctx, data, false)
				if err != nil {
					return err
				}
				return reportChange(cmd.OutOrStdout(), flags, change)
			}
			lock, err := lockNetns("sluice apply -f "+file, "a daemon takes the file through its API (give its --socket or --api)")
			if err != nil {
				return err
			}
			defer lock.Release()
			rememberTables(g.logger())
			p, err := plan.Build(cfg, nil)
			if err != nil {
				return err
			}
			dp, err := datapathFor(cfg, g.logger())
			if err != nil {
				return err
			}
			change, err := oneShotChange(ctx, cfg, p, dp, g.logger())
			if err != nil {
				return err
			}
			if err := dp.Apply(ctx, p); err != nil {
				return err
			}
			if err := flushOthers(ctx, cfg, g.logger()); err != nil {
				return err
			}
			if err := saveLastApply(dp, p, lastApplyPath()); err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: keeping this apply in %s failed, the next one reads the kernel: %v\n", lastApplyPath(), err)
			}
			if sections := daemonSections(cfg); len(sections) > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "%s: the %s section runs in the daemon (sluice serve), not here: only the services were programmed\n",
					fileName(file), strings.Join(sections, " and "))
			}
			return reportChange(cmd.OutOrStdout(), flags, change)
		},
	}
	fileFlag(cmd, &file)
	flags.register(cmd, false)
	return cmd
}

// daemonSections names the sections of cfg that only a daemon runs (announcing over BGP,
// replicating flows), which an apply without one leaves aside.
func daemonSections(cfg *config.Config) []string {
	var out []string
	if cfg.BGP != nil {
		out = append(out, "bgp")
	}
	if cfg.Sync != nil {
		out = append(out, "sync")
	}
	return out
}

func flushCmd(g *globals) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "flush",
		Short: "Remove every rule Sluice programmed",
		Long: `Flush removes what every datapath holds in this network namespace. It is refused while a
daemon runs here (it would program the rules again): stop it, with --flush-on-exit to remove them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			lock, err := lockNetns("sluice flush", "stop the daemon first, with --flush-on-exit to remove its rules")
			if err != nil {
				return err
			}
			defer lock.Release()
			return errors.Join(flushEvery(cmd.Context(), g.logger()), forgetLastApply(lastApplyPath()))
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "")
	_ = cmd.Flags().MarkDeprecated("force", "flush no longer asks the daemon on --socket: the network namespace's lock tells whether one runs here")
	return cmd
}

// kernelChange compares p, the plan of cfg, with what the kernel holds (every datapath's Status,
// as sluice list reads it without a daemon): listeners, modes, schedulers, backends and their
// weights. The other settings (fallback, flow timeout, health checks, persistence, quorum,
// limits, source lists, connection thresholds) are not read back: they are taken from cfg, so
// they never show as changed, and Apply programs them all the same.
func kernelChange(ctx context.Context, cfg *config.Config, p *plan.Plan, log *slog.Logger) (plan.Change, error) {
	status, err := everyStatus(ctx, log)
	if err != nil {
		return plan.Change{}, err
	}
	held, err := kernelConfig(cfg, status)
	if err != nil {
		return plan.Change{}, err
	}
	before, err := plan.Build(held, nil)
	if err != nil {
		return plan.Change{}, fmt.Errorf("reading what the kernel holds: %w", err)
	}
	return plan.Diff(before, p), nil
}

// kernelConfig is cfg with the services the kernel holds instead of its own (see kernelChange).
func kernelConfig(cfg *config.Config, status []datapath.ServiceStatus) (*config.Config, error) {
	held := cfg.Clone()
	held.Services = nil
	for _, st := range status {
		ports, err := config.ParsePortList(st.Ports)
		if err != nil {
			return nil, fmt.Errorf("the kernel's service %s: port %q: %w", st.Name, st.Ports, err)
		}
		s := config.Service{Name: st.Name, VIP: config.IPOf(st.VIP), Protocol: st.Protocol, Mode: st.Mode, Scheduler: st.Scheduler}
		file, _, err := engine.FindService(cfg, st.Name)
		if err == nil {
			// What the kernel's status does not tell is taken from the file.
			s = *file
			s.VIP, s.Protocol, s.Mode, s.Scheduler = config.IPOf(st.VIP), st.Protocol, st.Mode, st.Scheduler
			s.SorryServers, s.Backends = nil, nil
			if s.Fallback == config.FallbackSorry {
				s.Fallback = "" // the kernel's sorry servers are among its backends
			}
		}
		s.SetPorts(ports)
		if st.Scheduler == config.SchedulerMaglev && st.Slots > 0 {
			s.TableSize = st.Slots
		}
		for _, b := range st.Backends {
			held := config.Backend{Address: config.IPOf(b.Address), Port: b.Port, Weight: &b.Weight}
			if file != nil {
				if fb, _, err := engine.FindBackend(file, engine.BackendID(b.Address, b.Port)); err == nil {
					held.MaxConnections, held.MinConnections = fb.MaxConnections, fb.MinConnections
				}
			}
			s.Backends = append(s.Backends, held)
		}
		held.Services = append(held.Services, s)
	}
	return held, nil
}

// loadFile reads a config file ("-": standard input), at most boundedread.ConfigBytes of a regular
// file, and validates it here first, so that errors name the file and line.
func loadFile(cmd *cobra.Command, file string) ([]byte, *config.Config, error) {
	var data []byte
	var err error
	if file == "-" {
		data, err = boundedread.Reader(cmd.InOrStdin(), fileName(file), boundedread.ConfigBytes)
	} else {
		data, err = boundedread.File(file, boundedread.ConfigBytes)
	}
	if err != nil {
		return nil, nil, err
	}
	cfg, err := config.Parse(fileName(file), data)
	return data, cfg, err
}

// fileName names a -f argument in messages: "-" is standard input.
func fileName(file string) string {
	if file == "-" {
		return "stdin"
	}
	return file
}

// warn prints the config's warnings (config.Warnings).
func warn(w io.Writer, file string, cfg *config.Config) {
	for _, msg := range cfg.Warnings() {
		fmt.Fprintf(w, "warning: %s: %s\n", file, msg)
	}
}

// fileFlag adds the required -f FILE flag.
func fileFlag(cmd *cobra.Command, file *string) {
	cmd.Flags().StringVarP(file, "file", "f", "", "config file (- reads standard input)")
	_ = cmd.MarkFlagRequired("file")
}
