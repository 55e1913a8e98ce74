package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/plan"
)

func validateCmd() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "validate -f FILE",
		Short: "Check a config file without touching the kernel",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(file)
			if err != nil {
				return err
			}
			p, err := plan.Build(cfg, nil)
			if err != nil {
				return err
			}
			warn(cmd.ErrOrStderr(), file, cfg)
			fmt.Fprintf(cmd.OutOrStdout(), "%s: ok, %d services\n", file, len(p.Services))
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
config and reconciles; it returns once the datapath applied the file (--no-wait: at once). Without a daemon it programs the datapath directly and exits. Either way only
the difference is changed: applying the same file again changes nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			data, cfg, err := loadFile(file)
			if err != nil {
				return err
			}
			warn(cmd.ErrOrStderr(), file, cfg)
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
				return printChange(cmd.OutOrStdout(), change, false)
			}
			p, err := plan.Build(cfg, nil)
			if err != nil {
				return err
			}
			lock, err := lockNetns("sluice apply -f "+file, "a daemon takes the file through its API (give its --socket or --api)")
			if err != nil {
				return err
			}
			defer lock.Release()
			dp, err := datapathFor(cfg, g.logger())
			if err != nil {
				return err
			}
			if err := dp.Apply(ctx, p); err != nil {
				return err
			}
			if err := flushOthers(ctx, cfg, g.logger()); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "applied %s: %d services\n", file, len(p.Services))
			return nil
		},
	}
	fileFlag(cmd, &file)
	flags.register(cmd, false)
	return cmd
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
			return flushEvery(cmd.Context(), g.logger())
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "")
	_ = cmd.Flags().MarkDeprecated("force", "flush no longer asks the daemon on --socket: the network namespace's lock tells whether one runs here")
	return cmd
}

// warn prints the config's warnings (config.Warnings).
func warn(w io.Writer, file string, cfg *config.Config) {
	for _, msg := range cfg.Warnings() {
		fmt.Fprintf(w, "warning: %s: %s\n", file, msg)
	}
}

// fileFlag adds the required -f FILE flag.
func fileFlag(cmd *cobra.Command, file *string) {
	cmd.Flags().StringVarP(file, "file", "f", "", "config file")
	_ = cmd.MarkFlagRequired("file")
}
