// Command sluice is a Layer-4 load balancer that drives a kernel datapath (nftables, or an eBPF
// program at tc or XDP) from one declarative config.
package main

import (
	"os"

	"github.com/sluicelb/sluice/internal/cli"
)

func main() { os.Exit(cli.Execute()) }
