package cli

import (
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath/nft"
	"github.com/sluicelb/sluice/internal/plan"
)

func validateCmd() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "validate -f FILE",
		Short: "Check a config file without touching the kernel",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := loadPlan(file)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: ok, %d services\n", file, len(p.Services))
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "config file")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

func applyCmd(g *globals) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Program the datapath from a config file and exit (again with the same file: no change)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := loadPlan(file)
			if err != nil {
				return err
			}
			dp, err := nft.New(g.logger())
			if err != nil {
				return err
			}
			if err := dp.Apply(cmd.Context(), p); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "applied %s: %d services\n", file, len(p.Services))
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "config file")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

func flushCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "flush",
		Short: "Remove every rule Sluice programmed",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dp, err := nft.New(g.logger())
			if err != nil {
				return err
			}
			return dp.Flush(cmd.Context())
		},
	}
}

func loadPlan(file string) (*plan.Plan, error) {
	cfg, err := config.Load(file)
	if err != nil {
		return nil, err
	}
	slog.Debug("config loaded", "file", file, "services", len(cfg.Services))
	return plan.Build(cfg, nil)
}
