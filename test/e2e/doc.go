// Package e2e is Sluice's root-only end-to-end suite: it builds the sluice binary, brings up a
// network-namespace lab (internal/lab) and drives real TCP and UDP traffic from the lab's client
// through the balancer to nginx and UDP responders, once per datapath mode.
//
// Run it as root: go test -count=1 -v ./test/e2e/
// The soak (churn, API changes and a flapping backend on both datapaths) runs only when asked:
// SLUICE_SOAK=3m go test -count=1 -v -timeout 15m -run TestSoak ./test/e2e/
// Without root, nft, nginx or ip every test skips with the reason.
//
// TestDocsRunInTheLab runs every command of the sh blocks of README.md and docs/*.md as written,
// in the lab those commands build (prefix "sluice"); internal/cli's TestDocsNameRealCommands checks
// every sluice command the docs mention against the command line.
package e2e
