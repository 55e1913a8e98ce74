// Package labcli holds the sluice-lab command line: the network-namespace lab and the benchmarks
// that run Sluice in it, apart from the sluice binary an operator installs on a balancer.
package labcli

import (
	"github.com/spf13/cobra"

	"github.com/sluicelb/sluice/internal/cli"
)

// Execute runs the sluice-lab command line and returns the process exit status.
func Execute() int { return cli.Run(Command()) }

// Command is the whole sluice-lab command line.
func Command() *cobra.Command {
	root := &cobra.Command{
		Use:           "sluice-lab",
		Short:         "A network-namespace lab for Sluice, and the benchmarks that run in it (needs root)",
		Version:       cli.VersionLine("sluice-lab"),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.AddCommand(labCmds()...)
	root.AddCommand(benchCmd(), udpResponderCmd(), ppsSenderCmd())
	return root
}
