package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// benchScaleReport is the part of `sluice-lab bench scale --json` the smoke test reads, decoded
// independently of the product's types.
type benchScaleReport struct {
	Command string `json:"command"`
	Results struct {
		Options struct {
			Datapaths []string `json:"datapaths"`
			Services  []int    `json:"services"`
		} `json:"options"`
		Results []struct {
			Datapath     string  `json:"datapath"`
			Services     int     `json:"services"`
			Backends     int     `json:"backends"`
			NotReached   string  `json:"not_reached"`
			ApplyAll     float64 `json:"apply_all_s"`
			AddOneApply  float64 `json:"add_one_apply_s"`
			AddOneDaemon float64 `json:"add_one_daemon_s"`
			DaemonApply  float64 `json:"daemon_apply_s"`
			DaemonRSS    int64   `json:"daemon_rss_bytes"`
			RPS          float64 `json:"requests_per_second"`
			Ratio        float64 `json:"ratio"`
		} `json:"results"`
	} `json:"results"`
}

// TestBenchScale is the smoke test of `sluice-lab bench scale`: two tiny sizes, one repetition and
// one one-second wrk run each, in its own lab. It checks the table and JSON are well-formed and
// every size produced every figure; never how fast anything is.
func TestBenchScale(t *testing.T) {
	requireLab(t)
	jsonPath := filepath.Join(t.TempDir(), "scale.json")
	stdout, stderr := benchSmoke(t, benchScaleKind, "scale", "--services", "1,3",
		"--backends-per-service", "4", "--reps", "1", "--rounds", "1", "--duration", "1s", "--limit", "1m", "--json", jsonPath)
	if !strings.Contains(stderr, "nft, 3 services: adding one backend with sluice backend add (1/1)") {
		t.Errorf("no progress on stderr:\n%s", stderr)
	}

	var rep benchScaleReport
	readReport(t, jsonPath, &rep)
	r := rep.Results
	if want := len(r.Options.Datapaths) * len(r.Options.Services); len(r.Options.Services) != 2 || len(r.Results) != want {
		t.Fatalf("%d results for sizes %v and datapaths %v", len(r.Results), r.Options.Services, r.Options.Datapaths)
	}
	for _, x := range r.Results {
		figures := []float64{x.ApplyAll, x.AddOneApply, x.AddOneDaemon, x.DaemonApply, float64(x.DaemonRSS), x.RPS, x.Ratio}
		for _, f := range figures {
			if f <= 0 || x.NotReached != "" || x.Backends != 4*x.Services {
				t.Errorf("%s at %d services lacks a figure: %+v", x.Datapath, x.Services, x)
				break
			}
		}
		row := fmt.Sprintf("%s  %8d  %8d", x.Datapath, x.Services, x.Backends)
		if !strings.Contains(stdout, row) {
			t.Errorf("table lacks the row %q:\n%s", row, stdout)
		}
	}
	t.Logf("sluice-lab bench scale (not asserted):\n%s", stdout)
}
