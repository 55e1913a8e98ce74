package cli

import "github.com/spf13/cobra"

// placeholder until the lb benchmark lands
func benchLBCmd(f *benchFlags) *cobra.Command {
	return &cobra.Command{Use: "lb", Short: "not yet"}
}
