package bench

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

var updateBare = flag.Bool("update", false, "rewrite the golden files of testdata/bare")

// bareGolden compares got with testdata/bare/name (rewritten with -update).
func bareGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "bare", name)
	if *updateBare {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -update rewrites it):\n--- got ---\n%s", path, got)
	}
}

// bareLab is bench lb's service over three backends, by address and by MAC.
var (
	bareLab    = []bareService{{proto: "tcp", backends: []string{"10.91.2.11", "10.91.2.12", "10.91.2.13"}}}
	bareLabMAC = []bareService{{proto: "tcp", backends: []string{"02:00:00:00:00:0b", "02:00:00:00:00:0c", "02:00:00:00:00:0d"}}}
	barePPS    = []bareService{
		{proto: "udp", backends: []string{"10.91.2.11", "10.91.2.12"}},
		{proto: "tcp", backends: []string{"10.91.2.11", "10.91.2.12"}},
	}
)

// TestBareNftRules holds the bare nftables candidates' scripts, the rules docs/BENCHMARKS.md shows.
func TestBareNftRules(t *testing.T) {
	fwd := bareFwdPorts{in: "eth0", out: "eth1", mac: "02:00:00:00:00:01"}
	bareGolden(t, "nft-dnat.nft", bareNftRules(bareDNAT, bareLab, bareFwdPorts{}))
	bareGolden(t, "nft-masq.nft", bareNftRules(bareMasq, bareLab, bareFwdPorts{}))
	bareGolden(t, "nft-fwd.nft", bareNftRules(bareFwd, bareLabMAC, fwd))
	bareGolden(t, "nft-dnat-pps.nft", bareNftRules(bareDNAT, barePPS, bareFwdPorts{}))
}

// TestIptablesRules holds kube-proxy's layout as the iptables candidates restore it.
func TestIptablesRules(t *testing.T) {
	bareGolden(t, "iptables-dnat.rules", iptablesRules(bareLab))
	bareGolden(t, "iptables-dnat-pps.rules", iptablesRules(barePPS))
}

// TestBareCandidatesAreSelectable checks that every bench lists the bare baselines by name.
func TestBareCandidatesAreSelectable(t *testing.T) {
	bare := []string{"nft-dnat", "nft-masq", "nft-fwd", "iptables-dnat", "iptables-legacy-dnat"}
	var lb []string
	for _, p := range Peers() {
		lb = append(lb, p.Name())
	}
	for _, n := range bare {
		if !slices.Contains(lb, n) {
			t.Errorf("bench lb: no candidate %s among %v", n, lb)
		}
		if n != "nft-masq" && !slices.Contains(PPSCandidateNames(), n) {
			t.Errorf("bench pps: no candidate %s among %v", n, PPSCandidateNames())
		}
	}
	for _, n := range []string{"nft-dnat", "iptables-dnat", "iptables-legacy-dnat"} {
		if !slices.Contains(FloodCandidateNames(), n) {
			t.Errorf("bench flood: no candidate %s among %v", n, FloodCandidateNames())
		}
	}
}
