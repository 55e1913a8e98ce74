package e2e

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// benchFloodReport is the part of `sluice-lab bench flood --json` the smoke test reads, decoded
// independently of the product's types.
type benchFloodReport struct {
	Results struct {
		Candidates []string `json:"candidates"`
		Cells      []struct {
			Candidate  string  `json:"candidate"`
			Protection string  `json:"protection"`
			RPS        float64 `json:"requests_per_second"`
			FloodPPS   float64 `json:"flood_packets_per_second"`
			Backends   struct {
				ForgedSYNs   int64 `json:"forged_syns"`
				HalfOpenPeak int64 `json:"half_open_peak"`
			} `json:"backends_under_flood"`
			Rounds []json.RawMessage `json:"rounds"`
		} `json:"cells"`
	} `json:"results"`
}

// TestBenchFlood is the smoke test of `sluice-lab bench flood`: one round of short runs, in its own
// lab with an attacker. It checks that every candidate was measured with and without the flood,
// that the flood reached the balancer, and the counts that are facts, not timings: behind the
// synproxy no forged SYN and no half-open connection reached a backend, while behind plain nft
// DNAT the forged SYNs did (so the counter counts). Throughput is logged, never asserted.
func TestBenchFlood(t *testing.T) {
	requireLab(t)
	jsonPath := filepath.Join(t.TempDir(), "flood.json")
	stdout, _ := benchSmoke(t, benchFloodKind, "flood", "--duration", "2s", "--rounds", "1", "--json", jsonPath)
	var rep benchFloodReport
	readReport(t, jsonPath, &rep)
	r := rep.Results
	for _, want := range []string{"nft-nat", "nft-nat-synproxy", "ebpf-nat", "ebpf-nat-synproxy"} {
		if !slices.Contains(r.Candidates, want) {
			t.Errorf("candidates %v lack %s", r.Candidates, want)
		}
	}
	if len(r.Cells) != len(r.Candidates) {
		t.Fatalf("%d cells for %d candidates", len(r.Cells), len(r.Candidates))
	}
	for _, c := range r.Cells {
		if c.RPS <= 0 || c.FloodPPS <= 0 || c.Protection == "" || len(c.Rounds) != 1 {
			t.Errorf("%s lacks a figure: %+v", c.Candidate, c)
		}
		if !strings.Contains(stdout, c.Candidate) {
			t.Errorf("table lacks %s:\n%s", c.Candidate, stdout)
		}
		switch c.Candidate {
		case "nft-nat-synproxy", "ebpf-nat-synproxy":
			if c.Backends.ForgedSYNs != 0 || c.Backends.HalfOpenPeak != 0 {
				t.Errorf("behind the synproxy the flood reached the backends: %+v", c.Backends)
			}
		case "nft-nat":
			if c.Backends.ForgedSYNs == 0 {
				t.Errorf("behind plain DNAT no forged SYN was counted at the backends: %+v", c.Backends)
			}
		}
	}
	t.Logf("sluice-lab bench flood (not asserted):\n%s", stdout)
}
