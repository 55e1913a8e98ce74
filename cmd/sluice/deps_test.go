package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/testutil"
)

// labOnly are the packages of the lab and the benchmarks, which sluice-lab links and the
// operator's binary must not: they run apt-get, nginx, BIRD and packet generators.
var labOnly = []string{"internal/labcli", "internal/bench", "internal/lab", "internal/packetgen", "internal/napi", "internal/ethtool"}

// TestLinksNoLab checks with go list -deps that sluice links none of the lab's packages.
func TestLinksNoLab(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		testutil.Missing(t, "go list needs the go tool: %v", err)
	}
	out, err := exec.Command(gobin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	const module = "github.com/sluicelb/sluice/"
	if !slices.Contains(deps, module+"internal/cli") {
		t.Fatalf("go list -deps names no %sinternal/cli: is its output read right?\n%s", module, out)
	}
	for _, pkg := range deps {
		for _, lab := range labOnly {
			if pkg == module+lab || strings.HasPrefix(pkg, module+lab+"/") {
				t.Errorf("sluice links %s, which belongs in sluice-lab", pkg)
			}
		}
	}
}
