package e2e

import (
	"encoding/json"
	"testing"
)

// benchFleetReport is the part of `sluice-lab bench fleet -o json` the smoke test reads, decoded
// independently of the product's types.
type benchFleetReport struct {
	Results struct {
		Note  string `json:"note"`
		Cells []struct {
			Datapath string  `json:"datapath"`
			Workload string  `json:"workload"`
			Nodes    int     `json:"nodes"`
			RPS      float64 `json:"requests_per_second"`
			RatioOne float64 `json:"ratio_to_one_node"`
			RatioDir float64 `json:"ratio_to_direct"`
			Rounds   []struct {
				RPS float64 `json:"requests_per_second"`
			} `json:"rounds"`
		} `json:"cells"`
		Failover []struct {
			Datapath       string  `json:"datapath"`
			Nodes          int     `json:"nodes"`
			CutNode        int     `json:"cut_node"`
			ReconvergenceS float64 `json:"reconvergence_s"`
			RPSBefore      float64 `json:"requests_per_second_before"`
			Requests       int     `json:"requests"`
		} `json:"failover"`
	} `json:"results"`
}

// TestBenchFleet is the smoke test of `sluice-lab bench fleet`: one round of one-second runs through
// one and two ebpf nodes and the direct baseline, and a node failure, in its own lab. It checks
// the JSON has every cell with a figure and the failover, and that the lab is gone; never how
// fast anything is.
func TestBenchFleet(t *testing.T) {
	requireLab(t)
	stdout, _ := benchSmoke(t, benchFleetKind, "fleet", "--duration", "1s", "--rounds", "1", "--nodes", "2",
		"--datapath", "ebpf", "-o", "json")
	var rep benchFleetReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("JSON report: %v\n%s", err, stdout)
	}
	r := rep.Results
	if r.Note == "" {
		t.Error("no note on what the figures show")
	}
	seen := map[[2]any]bool{}
	for _, c := range r.Cells {
		seen[[2]any{c.Workload, c.Nodes}] = true
		if c.Datapath != "ebpf" || c.RPS <= 0 || c.RatioOne <= 0 || c.RatioDir <= 0 || len(c.Rounds) != 1 {
			t.Errorf("cell without a figure: %+v", c)
		}
		if c.Nodes == 1 && c.RatioOne != 1 || c.Nodes == 0 && c.RatioDir != 1 {
			t.Errorf("a cell's ratio to itself is not 1: %+v", c)
		}
	}
	for _, w := range []string{"keepalive", "per-conn"} {
		for nodes := range 3 {
			if !seen[[2]any{w, nodes}] {
				t.Errorf("no cell for %s through %d node(s) (0: direct): %+v", w, nodes, r.Cells)
			}
		}
	}
	if len(r.Failover) != 1 {
		t.Fatalf("%d failovers, want 1: %+v", len(r.Failover), r.Failover)
	}
	if fo := r.Failover[0]; fo.Datapath != "ebpf" || fo.Nodes != 2 || fo.CutNode != 2 || fo.ReconvergenceS <= 0 || fo.RPSBefore <= 0 || fo.Requests <= 0 {
		t.Errorf("failover lacks a figure: %+v", fo)
	}
	t.Logf("sluice-lab bench fleet (not asserted):\n%s", stdout)
}
