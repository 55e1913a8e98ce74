package packaging_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/datapath/ebpf"
	"github.com/sluicelb/sluice/internal/state"
	"github.com/sluicelb/sluice/internal/testutil"
)

// unitDirectives reads the [Service] section of a systemd unit: each key with its values in order
// (a key may be given several times, SystemCallFilter= say).
func unitDirectives(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			section = line
		case section == "[Service]":
			key, value, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("%s:%d: not KEY=VALUE: %q", path, n, line)
			}
			out[key] = append(out[key], value)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// unitCapabilities is the unit's CapabilityBoundingSet, the set the daemon runs with.
func unitCapabilities(t *testing.T) []string {
	t.Helper()
	set := unitDirectives(t, "sluice.service")["CapabilityBoundingSet"]
	if len(set) != 1 {
		t.Fatalf("sluice.service: CapabilityBoundingSet= given %d times, want once", len(set))
	}
	caps := strings.Fields(set[0])
	slices.Sort(caps)
	return caps
}

// documentedCapabilities are the capabilities docs/security.md explains, one table row each.
func documentedCapabilities(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile("../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	var caps []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(CAP_[A-Z_]+)` \\|").FindAllSubmatch(doc, -1) {
		caps = append(caps, string(m[1]))
	}
	slices.Sort(caps)
	return caps
}

// TestUnitHardening checks the unit's sandbox: the capabilities are the ones docs/security.md
// explains, and every hardening directive is there with its value.
func TestUnitHardening(t *testing.T) {
	if got, want := unitCapabilities(t), documentedCapabilities(t); !slices.Equal(got, want) {
		t.Errorf("sluice.service: CapabilityBoundingSet=%s, docs/security.md explains %s", strings.Join(got, " "), strings.Join(want, " "))
	}
	unit := unitDirectives(t, "sluice.service")
	want := map[string][]string{
		"AmbientCapabilities":     {""},
		"NoNewPrivileges":         {"yes"},
		"ProtectSystem":           {"strict"},
		"ReadWritePaths":          {"/sys/fs/bpf"},
		"StateDirectory":          {"sluice"},
		"RuntimeDirectory":        {"sluice"},
		"ProtectHome":             {"yes"},
		"PrivateTmp":              {"yes"},
		"PrivateMounts":           {"yes"},
		"PrivateDevices":          {"yes"},
		"ProtectKernelTunables":   {"yes"},
		"ProtectKernelModules":    {"yes"},
		"ProtectKernelLogs":       {"yes"},
		"ProtectControlGroups":    {"yes"},
		"ProtectClock":            {"yes"},
		"ProtectHostname":         {"yes"},
		"ProtectProc":             {"invisible"},
		"RestrictAddressFamilies": {"AF_UNIX AF_INET AF_INET6 AF_NETLINK"},
		"RestrictNamespaces":      {"net"},
		"LockPersonality":         {"yes"},
		"MemoryDenyWriteExecute":  {"yes"},
		"RestrictRealtime":        {"yes"},
		"RestrictSUIDSGID":        {"yes"},
		"SystemCallArchitectures": {"native"},
		"SystemCallFilter":        {"@system-service", "~@privileged", "bpf"},
		"SystemCallErrorNumber":   {"EPERM"},
		"UMask":                   {"0077"},
		"LimitMEMLOCK":            {"infinity"},
		"User":                    nil, // root: see the unit's comment and docs/security.md
		"DynamicUser":             nil,
		"ProcSubset":              nil, // pid would hide /proc/sys, where conntrack's fill is read
	}
	for key, values := range want {
		if got := unit[key]; !slices.Equal(got, values) {
			t.Errorf("sluice.service: %s=%q, want %q", key, got, values)
		}
	}

	// systemd's own score of the sandbox, where its analyzer is installed (Debian: systemd).
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		testutil.Missing(t, "systemd-analyze security: %v", err)
	}
	// --threshold counts tenths of the score it prints: 30 is 3.0.
	out, err := exec.Command("systemd-analyze", "security", "--offline=yes", "--threshold=30", "--no-pager", "sluice.service").CombinedOutput()
	if err != nil {
		t.Errorf("systemd-analyze security scores the unit above 3.0 (docs/security.md: 2.5): %v\n%s", err, out)
	}
}

// TestUnitCapabilitiesSuffice runs the daemon as the unit does, as root with no new privileges and
// only the unit's capabilities, in a network namespace of its own, on each datapath: nft, then
// ebpf on tc, tc again (adopting the program the last run left, which takes CAP_SYS_ADMIN), and
// XDP; with a BGP listener on port 179 and an exec health check. Each run must program its config
// with no permission error, and `sluice which` must answer with the same capabilities.
func TestUnitCapabilitiesSuffice(t *testing.T) {
	if testing.Short() {
		t.Skip("builds sluice and runs its daemon: not with -short")
	}
	if os.Geteuid() != 0 {
		testutil.Missing(t, "needs root: creates a network namespace and programs its datapaths")
	}
	for _, tool := range []string{"go", "ip", "nft", "nsenter", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.Missing(t, "needs %s: %v", tool, err)
		}
	}
	bset := "-all"
	for _, c := range unitCapabilities(t) {
		bset += ",+" + strings.ToLower(strings.TrimPrefix(c, "CAP_"))
	}
	reduced := []string{"setpriv", "--no-new-privs", "--bounding-set", bset, "--"}

	dir := t.TempDir()
	bin := filepath.Join(dir, "sluice")
	run(t, "go", "build", "-o", bin, "../cmd/sluice")

	ns := fmt.Sprintf("sluicepriv%d", os.Getpid())
	run(t, "ip", "netns", "add", ns)
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", ns).Run()
		os.RemoveAll(ebpf.NetnsPinPath(ns))
		os.RemoveAll(filepath.Dir(state.NetnsPath(ns))) // sluice --netns keeps its files there
	})
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", "priv0", "type", "veth", "peer", "name", "priv1"},
		{"addr", "add", "10.97.0.1/24", "dev", "priv0"},
		{"link", "set", "priv0", "up"},
		{"link", "set", "priv1", "up"},
	} {
		run(t, append([]string{"ip", "-n", ns}, args...)...)
	}
	// A balancer forwards: the ebpf datapath refuses a plan that needs forwarding it does not have.
	run(t, "ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_forward=1")

	for i, datapath := range []string{"datapath: nft", "datapath: ebpf\nattach: tc", "datapath: ebpf\nattach: tc", "datapath: ebpf\nattach: xdp"} {
		config := filepath.Join(dir, fmt.Sprintf("sluice%d.yaml", i))
		text := datapath + `
state: {persist: off}
bgp:
  asn: 65100
  router_id: 10.97.0.1
  listen_port: 179
  peers: [{address: 10.97.0.2, asn: 65000}]
services:
  - name: web
    vip: 10.97.9.100
    port: 80
    mode: dsr
    health_check: {type: exec, command: ["true"], interval: 1s}
    backends: [{address: 10.97.0.11}, {address: 10.97.0.12}]
`
		if err := os.WriteFile(config, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		socket := filepath.Join(dir, "sluice.sock")
		flags := []string{"--netns", ns, "--socket", socket}
		serve := append(append(slices.Clone(reduced), bin), append(flags, "serve", "-c", config)...)
		if i == 3 {
			serve = append(serve, "--flush-on-exit")
		}
		t.Run(fmt.Sprintf("%d/%s", i, strings.ReplaceAll(datapath, "\n", " ")), func(t *testing.T) {
			log := serveUntilProgrammed(t, bin, socket, serve)
			if i > 0 {
				out := run(t, append(append(slices.Clone(reduced), bin), append(flags, "which", "10.97.9.100:80", "10.97.0.50:40000")...)...)
				if !strings.Contains(out, "backend 10.97.0.1") {
					t.Errorf("sluice which: %s", out)
				}
			}
			if denied := regexp.MustCompile(`(?i).*(permission denied|operation not permitted).*`).Find(log); denied != nil {
				t.Errorf("the daemon was denied something: %s", denied)
			}
		})
	}
}

// serveUntilProgrammed starts the daemon (argv), waits until it has programmed its config and its
// BGP speaker listens, and stops it with SIGTERM when the test ends; it returns its log so far.
func serveUntilProgrammed(t *testing.T, bin, socket string, argv []string) (log []byte) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "sluice.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	readLog := func() []byte {
		data, _ := os.ReadFile(logPath)
		return data
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("the daemon exited with %v", err)
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("the daemon did not stop on SIGTERM")
		}
		if t.Failed() {
			t.Logf("daemon log:\n%s", readLog())
		}
	})
	answers := func(want string, args ...string) func() bool {
		return func() bool {
			select {
			case err := <-done:
				done <- err
				t.Fatalf("the daemon exited: %v", err)
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			out, _ := exec.CommandContext(ctx, bin, append([]string{"--socket", socket}, args...)...).Output()
			return strings.Contains(string(out), want)
		}
	}
	testutil.Eventually(t, "the daemon to program its config", answers(`"programmed": true`, "list", "-o", "json"))
	testutil.Eventually(t, "the daemon's BGP speaker to listen on port 179", answers("listening on port 179", "bgp"))
	return readLog()
}
