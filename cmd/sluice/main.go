// Command sluice is a Layer-4 load balancer driving kernel datapaths (nftables) from one
// declarative config.
package main

import (
	"os"

	"github.com/sluicelb/sluice/internal/cli"
)

func main() { os.Exit(cli.Execute()) }
