// Command sluice-lab builds a network-namespace lab (a client, balancers, nginx backends) and runs
// Sluice's benchmarks in it; the sluice binary beside it programs the balancers.
package main

import (
	"os"

	"github.com/sluicelb/sluice/internal/labcli"
)

func main() { os.Exit(labcli.Execute()) }
