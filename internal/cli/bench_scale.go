package cli

import "github.com/spf13/cobra"

// placeholder until the scale benchmark lands
func benchScaleCmd(f *benchFlags) *cobra.Command {
	return &cobra.Command{Use: "scale", Short: "not yet"}
}
