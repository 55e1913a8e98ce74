package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/lab"
	"github.com/sluicelb/sluice/internal/testutil"
)

// benchTimeout bounds one `sluice-lab bench` smoke run: lab up, one tiny round, lab down.
const benchTimeout = 5 * time.Minute

// benchNetReport is the part of `sluice-lab bench net --json` the smoke test reads, decoded
// independently of the product's types so that the output format is what gets tested.
type benchNetReport struct {
	Command string `json:"command"`
	Machine struct {
		Kernel string `json:"kernel"`
		CPUs   int    `json:"cpus"`
	} `json:"machine"`
	Results struct {
		Rounds   int    `json:"rounds"`
		Baseline string `json:"baseline"`
		Paths    []struct {
			Name           string  `json:"name"`
			Target         string  `json:"target"`
			BandwidthGbps  float64 `json:"bandwidth_gbps"`
			BandwidthRatio float64 `json:"bandwidth_ratio"`
			LatencyUs      float64 `json:"latency_us"`
			P99RTTUs       float64 `json:"p99_rtt_us"`
			LatencyRatio   float64 `json:"latency_ratio"`
			Samples        []struct {
				Round      int   `json:"round"`
				Bytes      int64 `json:"bytes"`
				RoundTrips int   `json:"round_trips"`
			} `json:"samples"`
		} `json:"paths"`
	} `json:"results"`
}

// TestBenchNet is the smoke test of `sluice-lab bench net`: one round of tiny measurements in its
// own lab. It checks that the table and the JSON are well-formed, that every path produced a
// figure and that the lab is gone afterwards; never how fast anything is.
func TestBenchNet(t *testing.T) {
	requireLab(t)
	if _, err := exec.LookPath("conntrack"); err != nil {
		testutil.Missing(t, "bench net needs conntrack: %v", err)
	}
	jsonPath := filepath.Join(t.TempDir(), "net.json")
	stdout, stderr := benchSmoke(t, benchNetKind, "net", "--backends", "1",
		"--duration", "300ms", "--rounds", "1", "--json", jsonPath)
	if !strings.Contains(stderr, "round 1/1: vxlan latency") {
		t.Errorf("no progress on stderr:\n%s", stderr)
	}

	wantPaths := []string{"direct", "balancer", "vxlan"}
	for _, name := range wantPaths {
		if !slices.ContainsFunc(strings.Split(stdout, "\n"), func(l string) bool { return strings.HasPrefix(l, name+" ") }) {
			t.Errorf("table has no %s line:\n%s", name, stdout)
		}
	}

	var rep benchNetReport
	readReport(t, jsonPath, &rep)
	if !strings.Contains(rep.Command, "bench net") || rep.Machine.Kernel == "" || rep.Machine.CPUs < 1 {
		t.Errorf("report envelope %q, machine %+v: want the command and the machine", rep.Command, rep.Machine)
	}
	r := rep.Results
	if r.Rounds != 1 || r.Baseline != "direct" {
		t.Errorf("rounds %d, baseline %q; want 1 and direct", r.Rounds, r.Baseline)
	}
	var names []string
	for _, p := range r.Paths {
		names = append(names, p.Name)
		if p.Target == "" || p.BandwidthGbps <= 0 || p.BandwidthRatio <= 0 || p.LatencyUs <= 0 || p.P99RTTUs <= 0 || p.LatencyRatio <= 0 {
			t.Errorf("path %s lacks a figure: %+v", p.Name, p)
		}
		if len(p.Samples) != 1 || p.Samples[0].Round != 1 || p.Samples[0].Bytes <= 0 || p.Samples[0].RoundTrips <= 0 {
			t.Errorf("path %s: samples %+v, want one of round 1 with bytes and round trips", p.Name, p.Samples)
		}
	}
	if !slices.Equal(names, wantPaths) {
		t.Errorf("paths %v, want %v", names, wantPaths)
	}
	t.Logf("sluice-lab bench net (not asserted):\n%s", stdout)
}

// downBenchLab tears the bench's lab down when the test ends: a safety net, as a bench tears its
// lab down itself.
func downBenchLab(t *testing.T, prefix string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := lab.New(prefix, 1).Down(ctx); err != nil {
			t.Errorf("tearing down the bench's lab: %v", err)
		}
	})
}

// benchSmoke runs `sluice-lab bench name --prefix P args...` in a lab of its own named after kind,
// with downBenchLab as a safety net, and fails t if the bench left any of that lab's namespaces
// behind.
func benchSmoke(t *testing.T, kind, name string, args ...string) (stdout, stderr string) {
	t.Helper()
	prefix := runPrefix(kind)
	downBenchLab(t, prefix)
	stdout, stderr = runBench(t, append([]string{"bench", name, "--prefix", prefix}, args...)...)
	if left := namespacesWithPrefix(prefix); len(left) > 0 {
		t.Errorf("bench %s left namespaces behind: %v", name, left)
	}
	return stdout, stderr
}

// readReport decodes the JSON report a bench wrote to path into rep, failing t if it cannot.
func readReport(t *testing.T, path string, rep any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, rep); err != nil {
		t.Fatalf("JSON report: %v\n%s", err, data)
	}
}

// runBench runs the sluice-lab binary with args (a `sluice-lab bench` command) and fails the test unless it
// succeeds; a run that outlives benchTimeout is stopped with SIGTERM, so that it tears its lab
// down, and so is one whose test process dies.
func runBench(t *testing.T, args ...string) (stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), benchTimeout)
	defer cancel()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, sluiceLabBin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = time.Minute
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Run(); err != nil {
		t.Fatalf("sluice-lab %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out.String(), errOut.String())
	}
	return out.String(), errOut.String()
}

// namespacesWithPrefix lists the named namespaces of the lab with this prefix.
func namespacesWithPrefix(prefix string) []string {
	entries, _ := os.ReadDir("/var/run/netns")
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix+"-") {
			names = append(names, e.Name())
		}
	}
	return names
}
