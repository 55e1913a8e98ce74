package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
)

func eventsCmd(g *globals) *cobra.Command {
	var follow bool
	var output string
	cmd := &cobra.Command{
		Use:   "events [--follow]",
		Short: "Show the daemon's recent events (backends up and down, drains, reloads, failed applies)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, err := g.requireDaemon(ctx)
			if err != nil {
				return err
			}
			var since uint64
			for {
				wait := time.Duration(0)
				if follow && since > 0 {
					wait = 30 * time.Second
				}
				events, err := c.Events(ctx, since, wait)
				if err != nil {
					return err
				}
				for _, e := range events {
					since = max(since, e.ID)
					if err := emit(cmd.OutOrStdout(), output, e, func(w io.Writer) error {
						_, err := fmt.Fprintf(w, "%s  %-15s %s %s  %s\n", e.Time.Format(time.RFC3339), e.Type, e.Service, e.Backend, e.Message)
						return err
					}); err != nil {
						return err
					}
				}
				if !follow {
					return nil
				}
				since = max(since, 1) // wait for the next event even when none was kept
			}
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing events as they happen")
	outputFlag(cmd, &output)
	return cmd
}
