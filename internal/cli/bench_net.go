package cli

import "github.com/spf13/cobra"

// placeholder until the net benchmark lands
func benchNetCmd(f *benchFlags) *cobra.Command {
	return &cobra.Command{Use: "net", Short: "not yet"}
}
