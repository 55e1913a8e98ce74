package e2e

import (
	"path/filepath"
	"strings"
	"testing"
)

// benchFailoverKind names the lab `sluice-lab bench failover` builds.
const benchFailoverKind = "slfo"

// benchFailoverReport is the part of `sluice-lab bench failover`'s JSON report the smoke test reads,
// decoded independently of the product's types.
type benchFailoverReport struct {
	Results struct {
		Method string `json:"method"`
		Cells  []struct {
			Event           string  `json:"event"`
			Datapath        string  `json:"datapath"`
			Mode            string  `json:"mode"`
			LongLived       int     `json:"long_lived"`
			LongLivedBroken int     `json:"long_lived_broken"`
			Requests        int     `json:"requests"`
			NewConns        int     `json:"new_conns"`
			NewFailed       int     `json:"new_failed"`
			Broken          int     `json:"broken"`
			Total           int     `json:"total"`
			ReconvergeS     float64 `json:"reconverge_s"`
			AddressMoves    int     `json:"address_moves"`
			RouteChanges    int     `json:"route_changes"`
			LongLivedOnNode int     `json:"long_lived_on_node"`
			Unsupported     string  `json:"unsupported"`
		} `json:"cells"`
	} `json:"results"`
}

// TestBenchFailover is the smoke test of `sluice-lab bench failover`: a node's death in an nft nat
// pair and in an ebpf nat pair, with few connections, in its own lab. It checks the table has
// the row and columns and that every cell counts what ran through it (totals that add up, the
// address moved to the backup); never how many broke or how fast anything is.
func TestBenchFailover(t *testing.T) {
	requireLab(t)
	report := filepath.Join(t.TempDir(), "failover.json")
	stdout, _ := benchSmoke(t, benchFailoverKind, "failover", "--datapath", "nft,ebpf", "--modes", "nat",
		"--events", "node-death", "--conns", "4", "--new-rate", "10", "--json", report)
	for _, want := range []string{"EVENT", "NFT-NAT", "EBPF-NAT", "node-death"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the table lacks %q:\n%s", want, stdout)
		}
	}
	var rep benchFailoverReport
	readReport(t, report, &rep)
	r := rep.Results
	if r.Method == "" {
		t.Error("no method in the report")
	}
	if len(r.Cells) != 2 {
		t.Fatalf("%d cells, want 2 (node-death in nft-nat and ebpf-nat): %+v", len(r.Cells), r.Cells)
	}
	for i, dp := range []string{"nft", "ebpf"} {
		c := r.Cells[i]
		if c.Event != "node-death" || c.Datapath != dp || c.Mode != "nat" {
			t.Errorf("cell %d is %s %s-%s, want node-death %s-nat", i, c.Event, c.Datapath, c.Mode, dp)
		}
		if c.LongLived != 4 || c.Requests < c.LongLived || c.NewConns <= 0 {
			t.Errorf("%s: the load did not run: %+v", dp, c)
		}
		if c.Broken != c.LongLivedBroken+c.NewFailed || c.Total != c.LongLived+c.NewConns || c.Broken > c.Total {
			t.Errorf("%s: the totals do not add up: %+v", dp, c)
		}
		if c.ReconvergeS <= 0 || c.AddressMoves < 1 {
			t.Errorf("%s: the backup's takeover was not seen: %+v", dp, c)
		}
	}
	t.Logf("sluice-lab bench failover (not asserted):\n%s", stdout)
}

// TestBenchFailoverFleet is the smoke test of bench failover's fleet events: a node's death in an
// ebpf fleet of two nodes behind the router, fullnat measured and nat shown as unsupported, with
// few connections, in its own lab. It checks the cells count what ran through them (totals that
// add up, the router's route changed, the connections through the dead node counted); never how
// many broke or how fast anything is.
func TestBenchFailoverFleet(t *testing.T) {
	requireLab(t)
	report := filepath.Join(t.TempDir(), "failover.json")
	stdout, _ := benchSmoke(t, benchFailoverKind, "failover", "--datapath", "ebpf", "--modes", "nat,fullnat",
		"--events", "fleet-node-death", "--conns", "4", "--new-rate", "10", "--json", report)
	for _, want := range []string{"BGP/ECMP fleet", "EBPF-NAT", "EBPF-FULLNAT", "fleet-node-death", "unsupported"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the table lacks %q:\n%s", want, stdout)
		}
	}
	var rep benchFailoverReport
	readReport(t, report, &rep)
	r := rep.Results
	if len(r.Cells) != 2 {
		t.Fatalf("%d cells, want 2 (fleet-node-death in ebpf-nat and ebpf-fullnat): %+v", len(r.Cells), r.Cells)
	}
	nat, fullnat := r.Cells[0], r.Cells[1]
	if nat.Mode != "nat" || nat.Unsupported == "" || nat.Total != 0 {
		t.Errorf("the nat cell is not an unmeasured unsupported one: %+v", nat)
	}
	c := fullnat
	if c.Event != "fleet-node-death" || c.Mode != "fullnat" || c.Unsupported != "" {
		t.Fatalf("the second cell is not a measured fleet-node-death ebpf-fullnat: %+v", c)
	}
	if c.LongLived != 4 || c.Requests < c.LongLived || c.NewConns <= 0 || c.LongLivedOnNode > c.LongLived {
		t.Errorf("the load did not run: %+v", c)
	}
	if c.Broken != c.LongLivedBroken+c.NewFailed || c.Total != c.LongLived+c.NewConns || c.Broken > c.Total {
		t.Errorf("the totals do not add up: %+v", c)
	}
	if c.ReconvergeS <= 0 || c.RouteChanges < 1 {
		t.Errorf("the router's withdrawal of the dead node was not seen: %+v", c)
	}
	t.Logf("sluice-lab bench failover, fleet (not asserted):\n%s", stdout)
}
