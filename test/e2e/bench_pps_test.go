package e2e

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/testutil"
)

// benchPPSReport is the part of `sluice-lab bench pps --json` the smoke test reads, decoded
// independently of the product's types.
type benchPPSReport struct {
	Results struct {
		Reals      int      `json:"reals"`
		Switch     string   `json:"switch"`
		CPU        int      `json:"cpu"`
		Steered    bool     `json:"steered"`
		Workloads  []string `json:"workloads"`
		Candidates []string `json:"candidates"`
		Cells      []struct {
			Candidate    string            `json:"candidate"`
			Workload     string            `json:"workload"`
			SentPPS      float64           `json:"sent_pps"`
			ForwardedPPS float64           `json:"forwarded_pps"`
			DropShare    float64           `json:"drop_share"`
			KernelCores  float64           `json:"kernel_cpu_cores"`
			Ratio        float64           `json:"ratio_to_direct"`
			Rounds       []json.RawMessage `json:"rounds"`
		} `json:"cells"`
	} `json:"results"`
}

// TestBenchPPS is the smoke test of `sluice-lab bench pps`: one round of 1 s sends through a few
// candidates (tc and XDP among them), in its own lab, with the lab's switch in its stack and at
// XDP, and with the balancer steered to a CPU of its own (--steer: Sluice's sender, threaded
// NAPI pollers pinned). It checks the report's shape and that every candidate forwarded packets of both
// workloads to the backends; rates are logged, never asserted.
func TestBenchPPS(t *testing.T) {
	requireLab(t)
	if _, err := exec.LookPath("trafgen"); err != nil {
		testutil.Missing(t, "needs trafgen (netsniff-ng; scripts/deps.sh installs it): %v", err)
	}
	for _, sw := range []string{"stack", "xdp"} {
		t.Run("switch "+sw, func(t *testing.T) {
			testBenchPPS(t, sw, false, []string{"nft-nat", "ebpf-dsr", "ebpf-dsr-xdp"})
		})
	}
	t.Run("steered", func(t *testing.T) { testBenchPPS(t, "stack", true, []string{"nft-nat", "ebpf-dsr", "ebpf-dsr-xdp"}) })
}

func testBenchPPS(t *testing.T, sw string, steer bool, measured []string) {
	jsonPath := filepath.Join(t.TempDir(), "pps.json")
	candidates := append([]string{"direct"}, measured...)
	args := []string{"--duration", "1s", "--rounds", "1", "--switch", sw, "--candidates", strings.Join(measured, ","), "--json", jsonPath}
	if steer {
		args = append(args, "--steer")
	}
	stdout, _ := benchSmoke(t, benchPPSKind, "pps", args...)
	t.Logf("\n%s", stdout)
	var rep benchPPSReport
	readReport(t, jsonPath, &rep)
	r := rep.Results
	if r.Switch != sw || r.Steered != steer || (steer && r.CPU != 1) {
		t.Errorf("switch %q, steered %v, measured CPU %d in the report; want %q, %v (CPU 1 when steered)", r.Switch, r.Steered, r.CPU, sw, steer)
	}
	if r.Reals != 100 || !slices.Equal(r.Workloads, []string{"udp", "syn"}) || !slices.Equal(r.Candidates, candidates) {
		t.Fatalf("reals %d, workloads %v, candidates %v; want 100, [udp syn], %v", r.Reals, r.Workloads, r.Candidates, candidates)
	}
	if len(r.Cells) != len(r.Workloads)*len(r.Candidates) {
		t.Fatalf("%d cells for %d workloads of %d candidates", len(r.Cells), len(r.Workloads), len(r.Candidates))
	}
	for _, c := range r.Cells {
		switch {
		case len(c.Rounds) != 1:
			t.Errorf("%s, %s: %d rounds, want 1", c.Candidate, c.Workload, len(c.Rounds))
		case c.SentPPS <= 0 || c.ForwardedPPS <= 0:
			t.Errorf("%s, %s: sent %.0f/s, forwarded %.0f/s: nothing got through", c.Candidate, c.Workload, c.SentPPS, c.ForwardedPPS)
		case c.DropShare < 0 || c.DropShare > 1 || c.KernelCores <= 0 || c.Ratio <= 0:
			t.Errorf("%s, %s: drop share %v, kernel cores %v, ratio %v", c.Candidate, c.Workload, c.DropShare, c.KernelCores, c.Ratio)
		case c.Candidate == "direct" && c.Ratio != 1:
			t.Errorf("direct, %s: ratio to itself %v", c.Workload, c.Ratio)
		}
	}
}
