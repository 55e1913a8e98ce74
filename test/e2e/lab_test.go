package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/lab"
)

// cliTimeout bounds one sluice or nft invocation.
const cliTimeout = 30 * time.Second

// cliResult is the outcome of one command.
type cliResult struct {
	Stdout, Stderr string
	Err            error
}

// sluice runs the binary under test inside the balancer namespace: sluice --netns <lb> args...
func sluice(t *testing.T, args ...string) cliResult {
	t.Helper()
	return run(t, sluiceBin, append([]string{"--netns", theLab.BalancerNS()}, args...)...)
}

func run(t *testing.T, name string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return cliResult{Stdout: stdout.String(), Stderr: stderr.String(), Err: err}
}

// mustSluice runs sluice and fails the test unless it succeeds.
func mustSluice(t *testing.T, args ...string) string {
	t.Helper()
	r := sluice(t, args...)
	if r.Err != nil {
		t.Fatalf("sluice %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.Err, r.Stdout, r.Stderr)
	}
	return r.Stdout
}

// writeConfig stores a config in the test's temp dir and returns its path.
func writeConfig(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// apply programs a config on the balancer.
func apply(t *testing.T, text string) {
	t.Helper()
	mustSluice(t, "apply", "-f", writeConfig(t, "sluice.yaml", text))
}

// flush removes everything sluice programmed on the balancer.
func flush(t *testing.T) {
	t.Helper()
	mustSluice(t, "flush")
}

// applyFresh starts a test from a clean balancer: flush (dropping state such as DSR flow maps
// left by earlier tests), then apply.
func applyFresh(t *testing.T, text string) {
	t.Helper()
	flush(t)
	apply(t, text)
}

// kernelState is what the flavor's datapath holds in the balancer namespace: the nft ruleset, or
// for ebpf the services, slots and backends `sluice list` reads from the pinned maps. Counters are
// left out: a late segment of an earlier test's connection is balanced (as a mid-stream packet
// must be) and counted, which is no change of the programmed state.
func kernelState(t *testing.T, f Flavor) string {
	t.Helper()
	if f.Datapath != "ebpf" {
		return maskVolatile(ruleset(t))
	}
	var services []map[string]any
	out := mustSluice(t, "list", "-o", "json")
	if err := json.Unmarshal([]byte(out), &services); err != nil {
		t.Fatalf("sluice list -o json: %v\n%s", err, out)
	}
	for _, s := range services {
		backends, _ := s["backends"].([]any)
		for _, b := range backends {
			for _, counter := range []string{"flows", "active_flows", "packets", "bytes"} {
				delete(b.(map[string]any), counter)
			}
		}
	}
	state, err := json.MarshalIndent(services, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(state)
}

// ruleset is `nft list ruleset` inside the balancer namespace.
func ruleset(t *testing.T) string {
	t.Helper()
	r := run(t, "ip", "netns", "exec", theLab.BalancerNS(), "nft", "list", "ruleset")
	if r.Err != nil {
		t.Fatalf("nft list ruleset: %v: %s", r.Err, r.Stderr)
	}
	return r.Stdout
}

// listedService and listedBackend are what `sluice list -o json` prints, decoded independently of
// the product's types so that the CLI's output format is what gets tested.
type listedService struct {
	Name      string          `json:"name"`
	Protocol  string          `json:"protocol"`
	VIP       string          `json:"vip"`
	Ports     string          `json:"ports"`
	Mode      string          `json:"mode"`
	Scheduler string          `json:"scheduler"`
	Slots     int             `json:"slots"`
	Backends  []listedBackend `json:"backends"`
}

type listedBackend struct {
	Address string  `json:"address"`
	Port    int     `json:"port"`
	Weight  int     `json:"weight"`
	Share   float64 `json:"share"`
	Flows   uint64  `json:"flows"`
	Packets uint64  `json:"packets"`
	Bytes   uint64  `json:"bytes"`
	// Connections is the active flow count of a counting datapath (lc, wlc, max_connections).
	Connections uint64 `json:"connections"`
	State       string `json:"state"`
}

// list is `sluice list -o json` decoded.
func list(t *testing.T) []listedService {
	t.Helper()
	out := mustSluice(t, "list", "-o", "json")
	var services []listedService
	if err := json.Unmarshal([]byte(out), &services); err != nil {
		t.Fatalf("sluice list -o json: %v\n%s", err, out)
	}
	return services
}

// readSysctl reads a sysctl (dotted form) inside namespace ns.
func readSysctl(t *testing.T, ns, key string) string {
	t.Helper()
	var b []byte
	err := theLab.Do(ns, func() (err error) {
		// /proc/sys/net resolves to the namespace of the thread that opens it.
		b, err = os.ReadFile(filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/")))
		return err
	})
	if err != nil {
		t.Fatalf("read sysctl %s in %s: %v", key, ns, err)
	}
	return strings.TrimSpace(string(b))
}

// setSysctl sets a sysctl in namespace ns for the rest of the test and restores it afterwards.
func setSysctl(t *testing.T, ns, key, value string) {
	t.Helper()
	old := readSysctl(t, ns, key)
	if err := lab.SetSysctl(ns, key, value); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lab.SetSysctl(ns, key, old); err != nil {
			t.Errorf("restore %s: %v", key, err)
		}
	})
}

// timeWaits counts each backend's TIME_WAIT sockets of port 80 whose peer port is in
// [first, last]: the evidence that a churn run reused 4-tuples the backends still held (with
// fullnat the peer is the balancer, which keeps the client's port). nil when ss is not
// available; it is only logged.
func timeWaits(t *testing.T, first, last int) map[string]int {
	t.Helper()
	if _, err := exec.LookPath("ss"); err != nil {
		return nil
	}
	counts := map[string]int{}
	for i := 1; i <= theLab.Backends; i++ {
		r := run(t, "ip", "netns", "exec", theLab.BackendNS(i), "ss", "-Htn", "state", "time-wait",
			fmt.Sprintf("( sport = :80 and dport >= :%d and dport <= :%d )", first, last))
		if r.Err != nil {
			return nil
		}
		counts[lab.BackendName(i)] = strings.Count(r.Stdout, "\n")
	}
	return counts
}

// bypassRxPackets is the packet count the client received on its bypass leg (byp0, on the
// backends' bridge): DSR replies arrive there, straight from the backends.
func bypassRxPackets(t *testing.T) uint64 {
	t.Helper()
	r := run(t, "ip", "-j", "-s", "-n", theLab.ClientNS(), "link", "show", "byp0")
	if r.Err != nil {
		t.Fatalf("ip link show byp0: %v: %s", r.Err, r.Stderr)
	}
	var links []struct {
		Stats struct {
			RX struct {
				Packets uint64 `json:"packets"`
			} `json:"rx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &links); err != nil || len(links) != 1 {
		t.Fatalf("ip link show byp0: %v: %s", err, r.Stdout)
	}
	return links[0].Stats.RX.Packets
}

// requireRefused checks that applying a config fails with the given reason and changes nothing.
// Counters and the countdown of timed-out elements are masked: late segments of earlier tests'
// connections still cross the balancer and move them.
func requireRefused(t *testing.T, text, reason string) {
	t.Helper()
	before := maskVolatile(ruleset(t))
	r := sluice(t, "apply", "-f", writeConfig(t, "refused.yaml", text))
	if r.Err == nil || !strings.Contains(r.Stderr, reason) {
		t.Fatalf("apply: err %v, stderr %q; want a failure saying %q", r.Err, r.Stderr, reason)
	}
	if after := maskVolatile(ruleset(t)); after != before {
		t.Fatalf("a refused apply changed the ruleset:\n%s", lineDiff(before, after))
	}
}
