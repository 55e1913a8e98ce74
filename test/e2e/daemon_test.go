package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/lab"
)

// Health-check timing of the daemon tests: a stopped backend is out after fall x interval (plus
// one timeout), a restarted one back after rise x interval.
const (
	checkInterval = 300 * time.Millisecond
	checkTimeout  = 200 * time.Millisecond
	checkRise     = 2
	checkFall     = 2
	// detectSlack is added to the bounds above: the daemon's apply pause and the tests' polling.
	// It is generous on purpose: the bound checks the rise/fall logic, not the machine's speed.
	detectSlack = 2 * time.Second
)

// daemon is a `sluice serve` running in a balancer namespace.
type daemon struct {
	t      *testing.T
	ns     string // the balancer namespace
	config string
	socket string
	log    string
	state  string   // the state file
	flags  []string // serve's flags besides -c
	cmd    *exec.Cmd
	done   chan error
}

// startDaemon runs `sluice serve` on a config, with serve's flags, and waits until its API
// answers. The daemon keeps its running config in the test's temporary directory (state.path),
// not in /var/lib/sluice.
func startDaemon(t *testing.T, config string, flags ...string) *daemon {
	t.Helper()
	return startDaemonIn(t, theLab.BalancerNS(), config, flags...)
}

// startDaemonIn is startDaemon in the balancer namespace ns.
func startDaemonIn(t *testing.T, ns, config string, flags ...string) *daemon {
	t.Helper()
	dir := t.TempDir()
	d := &daemon{t: t, ns: ns, config: config, socket: filepath.Join(dir, "sluice.sock"), log: filepath.Join(dir, "sluice.log"),
		state: filepath.Join(dir, "running.yaml"), flags: flags}
	text, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(config, append(text, "state: {path: "+d.state+"}\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // registered first: a daemon that never answers shows its log too
		d.stop()
		if t.Failed() {
			if data, err := os.ReadFile(d.log); err == nil {
				t.Logf("daemon log:\n%s", data)
			}
		}
	})
	d.start()
	return d
}

func (d *daemon) start() {
	d.t.Helper()
	logFile, err := os.OpenFile(d.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		d.t.Fatal(err)
	}
	defer logFile.Close()
	d.cmd = exec.Command(sluiceBin, append([]string{"--netns", d.ns, "--socket", d.socket, "--log-level", "debug",
		"serve", "-c", d.config}, d.flags...)...)
	d.cmd.Stdout, d.cmd.Stderr = logFile, logFile
	if err := d.cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	d.done = make(chan error, 1)
	go func() { d.done <- d.cmd.Wait() }()
	waitFor(d.t, "the daemon's API", 10*time.Second, func() bool {
		r := run(d.t, sluiceBin, "--socket", d.socket, "list", "-o", "json")
		return r.Err == nil && strings.Contains(r.Stdout, `"programmed": true`)
	})
}

// stop sends SIGTERM and waits for a clean exit (the datapath stays).
func (d *daemon) stop() {
	if d.cmd == nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.done:
		if err != nil {
			d.t.Errorf("daemon exited with %v", err)
		}
	case <-time.After(15 * time.Second):
		// SIGQUIT makes the Go runtime write every goroutine's stack to the log: where it hung.
		_ = d.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-d.done:
		case <-time.After(5 * time.Second):
			_ = d.cmd.Process.Kill()
			<-d.done
		}
		d.t.Error("daemon did not stop within 15 s of SIGTERM (its goroutines' stacks are in its log)")
	}
	d.cmd = nil
}

// kill kills the daemon with SIGKILL, as a crash would.
func (d *daemon) kill() {
	d.t.Helper()
	if err := d.cmd.Process.Kill(); err != nil {
		d.t.Fatal(err)
	}
	<-d.done
	d.cmd = nil
}

// cli runs a sluice command against the daemon.
func (d *daemon) cli(args ...string) cliResult {
	return run(d.t, sluiceBin, append([]string{"--socket", d.socket}, args...)...)
}

// mustJSON runs a sluice command with -o json and decodes its output into v.
func (d *daemon) mustJSON(v any, args ...string) {
	d.t.Helper()
	r := d.cli(append(args, "-o", "json")...)
	if r.Err != nil {
		d.t.Fatalf("sluice %s: %v\n%s", strings.Join(args, " "), r.Err, r.Stderr)
	}
	if err := json.Unmarshal([]byte(r.Stdout), v); err != nil {
		d.t.Fatalf("sluice %s -o json: %v\n%s", strings.Join(args, " "), err, r.Stdout)
	}
}

// probeState is the state `sluice health` shows for a target ("" when it has no probe).
func (d *daemon) probeState(target string) string {
	var probes []struct {
		Target string `json:"target"`
		State  string `json:"state"`
	}
	d.mustJSON(&probes, "health")
	for _, p := range probes {
		if p.Target == target {
			return p.State
		}
	}
	return ""
}

// programmedWeight is the weight the kernel holds for a backend of a service, -1 when absent.
func (d *daemon) programmedWeight(service, address string) int {
	var services []struct {
		Name     string `json:"name"`
		Backends []struct {
			Address          string `json:"address"`
			ProgrammedWeight int    `json:"programmed_weight"`
		} `json:"backends"`
	}
	d.mustJSON(&services, "list")
	for _, s := range services {
		for _, b := range s.Backends {
			if s.Name == service && b.Address == address {
				return b.ProgrammedWeight
			}
		}
	}
	return -1
}

func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not reached within %v", what, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

// request is one request of a steady load.
type request struct {
	start   time.Time
	backend string
	err     error
}

// Bounds of a steady load, whatever the test does meanwhile: it stops by itself after
// loadRequests requests or loadDuration, whichever comes first.
const (
	loadRequests = 200_000
	loadDuration = 40 * time.Second
)

// background is the goroutines of a load, which run until stop is closed; a load embeds it.
type background struct {
	stop chan struct{}
	wg   sync.WaitGroup
}

// finish stops the goroutines and waits for them; a second call only waits.
func (b *background) finish() {
	select {
	case <-b.stop:
	default:
		close(b.stop)
	}
	b.wg.Wait()
}

// steadyLoad makes one-request connections from the client namespace, each worker as fast as it
// goes, until stopped or out of its bounds.
type steadyLoad struct {
	background
	mu       sync.Mutex
	requests []request
}

func startLoad(t *testing.T, workers int, once func() (string, error)) *steadyLoad {
	return startLoadIn(t, theLab, workers, once)
}

// startLoadIn is startLoad from the client namespace of lab l.
func startLoadIn(t *testing.T, l *lab.Lab, workers int, once func() (string, error)) *steadyLoad {
	load := &steadyLoad{background: background{stop: make(chan struct{})}}
	deadline := time.Now().Add(loadDuration)
	for range workers {
		load.wg.Go(func() {
			_ = l.Do(l.ClientNS(), func() error {
				for load.goesOn(deadline) {
					start := time.Now()
					backend, err := once()
					load.mu.Lock()
					load.requests = append(load.requests, request{start, backend, err})
					load.mu.Unlock()
				}
				return nil
			})
		})
	}
	t.Cleanup(load.finish)
	return load
}

// goesOn tells a worker whether to make another request: the load is neither stopped nor out of
// its bounds.
func (l *steadyLoad) goesOn(deadline time.Time) bool {
	select {
	case <-l.stop:
		return false
	default:
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.requests) < loadRequests && time.Now().Before(deadline)
}

// since sums up the requests started at or after t: count, failures (with the first errors), per backend.
func (l *steadyLoad) since(t time.Time) (n, failed int, perBackend map[string]int, firstErrs []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	perBackend = map[string]int{}
	for _, r := range l.requests {
		if r.start.Before(t) {
			continue
		}
		n++
		if r.err != nil {
			failed++
			if len(firstErrs) < keptErrors {
				firstErrs = append(firstErrs, r.err.Error())
			}
			continue
		}
		perBackend[r.backend]++
	}
	return n, failed, perBackend, firstErrs
}

// reusedPorts is the pool of client ports the health test's load cycles through: each is reused
// within a second, well inside conntrack's CLOSE and SYN_SENT timeouts (5 s under Sluice's
// policy), so a stale entry of a fallen backend would take a new connection to it. Outside the ephemeral
// range, so that no kernel-picked port collides.
type reusedPorts chan int

func newReusedPorts(first, n int) reusedPorts {
	p := make(reusedPorts, n)
	for port := first; port < first+n; port++ {
		p <- port
	}
	return p
}

// httpOnce makes one request from the pool's least recently used port. A port the client itself
// still holds (EADDRINUSE, EADDRNOTAVAIL: its own TIME_WAIT after a failed request) is put back
// and another taken: that is the client's limit, not the balancer's.
func (p reusedPorts) httpOnce(to netip.AddrPort) (string, error) {
	for {
		port := <-p
		backend, err := httpFrom(to, port)
		p <- port
		if !errors.Is(err, syscall.EADDRINUSE) && !errors.Is(err, syscall.EADDRNOTAVAIL) {
			return backend, err
		}
	}
}

// waitRequests waits until at least n requests started at or after t have ended.
func (l *steadyLoad) waitRequests(tt *testing.T, what string, t time.Time, n int) {
	tt.Helper()
	waitFor(tt, what, 30*time.Second, func() bool {
		got, _, _, _ := l.since(t)
		return got >= n
	})
}

// unreadRequests counts the connections to backend i's port 80 that hold a request nobody has
// read: queued for accept, or accepted and not read (a frozen nginx's).
func unreadRequests(t *testing.T, i int) int {
	t.Helper()
	r := run(t, "ip", "netns", "exec", theLab.BackendNS(i), "ss", "-Htn", "state", "established", "( sport = :80 )")
	if r.Err != nil {
		t.Fatalf("ss in %s: %v: %s", theLab.BackendNS(i), r.Err, r.Stderr)
	}
	n := 0
	for line := range strings.Lines(r.Stdout) {
		if f := strings.Fields(line); len(f) > 0 && f[0] != "0" { // Recv-Q
			n++
		}
	}
	return n
}

// closedFlowsTo counts the balancer's conntrack entries in CLOSE state that a backend answered.
func closedFlowsTo(t *testing.T, backend string) int {
	t.Helper()
	r := run(t, "ip", "netns", "exec", theLab.BalancerNS(), "conntrack", "-L", "-p", "tcp", "--state", "CLOSE", "--reply-src", backend)
	if r.Err != nil {
		t.Fatalf("conntrack -L: %v: %s", r.Err, r.Stderr)
	}
	return strings.Count(r.Stdout, "\n")
}

// testHealthUnderLoad: under a load of one-request connections through the VIP from a small pool
// of reused client ports, a backend that hangs and then crashes is taken out within fall x
// interval, after which no new connection fails or reaches it; starting it again brings it back
// within rise x interval; restarting the daemon loses no request.
//
// The crash is what leaves stale flows behind. Every load worker gets stuck on the frozen nginx
// (a request it will never read), and the kill makes the kernel reset those connections: under
// nat and fullnat, conntrack entries in CLOSE state that have seen a reply. Conntrack reopens such
// an entry, with its translation, for a SYN that reuses its tuple: the port goes to the dead
// backend, is refused, and the entry lives on, for the ports cycle well within its timeout. So
// unless the daemon drops the fallen backend's stale entries (DropStaleFlows), every stuck port
// fails each time it is reused after the decision; under dsr, unless a SYN is balanced anew.
// The check is TCP, not HTTP: a frozen nginx still completes handshakes, so the backend is judged
// only once it has crashed, as one that dies at once.
func testHealthUnderLoad(t *testing.T, f Flavor) {
	svc := webService("maglev", equalPool(false))
	svc.Extra = []string{fmt.Sprintf("health_check: {type: tcp, interval: %s, timeout: %s, rise: %d, fall: %d}",
		checkInterval, checkTimeout, checkRise, checkFall)}
	freshBalancer(t)
	d := startDaemon(t, writeConfig(t, "sluice.yaml", f.Config(svc)))
	const victim = 2
	victimAddr := theLab.BackendAddr(victim, false).String()
	victimTarget := victimAddr + ":80"
	const poolSize = 50
	ports := newReusedPorts(20000, poolSize)
	load := startLoad(t, workers, func() (string, error) { return ports.httpOnce(svc.Addr()) })
	waitFor(t, "every port used and b2 answering", 30*time.Second, func() bool {
		n, _, per, _ := load.since(time.Time{})
		return n >= 2*poolSize && per["b2"] > 0
	})
	if n, failed, per, errs := load.since(time.Time{}); failed > 0 {
		t.Fatalf("before any change: %d requests, %d failed %v, per backend %v", n, failed, errs, per)
	}

	ctx := context.Background()
	t.Cleanup(func() {
		_ = theLab.KillBackend(context.Background(), victim) // frozen, if the test stopped half-way
		_ = theLab.StartBackend(context.Background(), victim)
	})
	stopped := time.Now()
	if err := theLab.FreezeBackend(ctx, victim); err != nil {
		t.Fatal(err)
	}
	// Each worker gets stuck once one of its reused ports hashes to the frozen backend: bounded
	// generously, as a loaded machine runs the workers slowly.
	waitFor(t, "every load worker stuck on the frozen backend", 30*time.Second, func() bool { return unreadRequests(t, victim) >= workers })
	if err := theLab.KillBackend(ctx, victim); err != nil {
		t.Fatal(err)
	}
	if f.Datapath == "nft" && f.Mode != "dsr" {
		t.Logf("backend killed: %d conntrack entries in CLOSE state point at it", closedFlowsTo(t, victimAddr))
	}
	out := waitFor(t, "the killed backend marked down", time.Duration(checkFall)*checkInterval+checkTimeout+detectSlack,
		func() bool { return d.probeState(victimTarget) == "down" })
	waitFor(t, "the killed backend out of the table", detectSlack, func() bool { return d.programmedWeight("web", victimAddr) == 0 })
	if f.Datapath == "nft" {
		// The decision ends once the fallen backend's conntrack entries that are not established
		// are gone: the flows_reset event follows their deletion.
		waitFor(t, "the fallen backend's stale flows dropped", detectSlack, func() bool {
			r := d.cli("events")
			return strings.Contains(r.Stdout, "flows_reset") && strings.Contains(r.Stdout, victimAddr)
		})
	}
	removed := time.Now()
	n, failed, _, _ := load.since(stopped)
	t.Logf("backend frozen, then killed: marked down after %v (fall %d x interval %v); %d requests failed of %d in the meantime",
		out.Round(time.Millisecond), checkFall, checkInterval, failed, n)

	const reuses = 10
	load.waitRequests(t, "every port reused ten times after the decision", removed, reuses*poolSize)
	n, failed, per, errs := load.since(removed)
	t.Logf("after the backend was taken out: %d requests from %d reused ports, %d failed, per backend %v", n, poolSize, failed, per)
	if failed > 0 || per["b2"] > 0 || n == 0 {
		t.Fatalf("after the backend was taken out: %d requests, %d failed %v, per backend %v", n, failed, errs, per)
	}

	restarted := time.Now()
	if err := theLab.StartBackend(ctx, victim); err != nil {
		t.Fatal(err)
	}
	back := waitFor(t, "the restarted backend marked up", time.Duration(checkRise)*checkInterval+detectSlack,
		func() bool { return d.probeState(victimTarget) == "up" })
	// New clients reach it. (The load's ports need not: under nft dsr a port keeps its
	// remembered backend while that one takes new flows.)
	fresh := hammer(t, workers, 100, func() (string, error) { return httpOnce(svc.Addr()) })
	fresh.requireNoFailures(t)
	if fresh.PerBackend["b2"] == 0 {
		t.Fatalf("the restarted backend takes no new connection: %v", fresh)
	}
	t.Logf("backend restarted: marked up after %v (rise %d x interval %v)", back.Round(time.Millisecond), checkRise, checkInterval)

	// Restart the daemon under load: the kernel keeps forwarding, the new daemon adopts it.
	d.stop()
	load.waitRequests(t, "requests while the daemon is down", time.Now(), poolSize)
	d.start()
	load.waitRequests(t, "requests after the daemon's restart", time.Now(), poolSize)
	load.finish()
	n, failed, per, errs = load.since(restarted)
	t.Logf("from the backend's return to the end (backend restart, daemon restart): %d requests, %d failed, per backend %v", n, failed, per)
	if failed > 0 {
		t.Fatalf("%d requests failed after the backend's return (across it and a daemon restart): %v", failed, errs)
	}
}

// freshBalancer flushes the balancer's rules and its conntrack table, so that flows left by
// earlier tests (a reset flow's re-balanced remains, say) do not count as active here.
func freshBalancer(t *testing.T) {
	t.Helper()
	flush(t)
	if r := run(t, "ip", "netns", "exec", theLab.BalancerNS(), "conntrack", "-F"); r.Err != nil {
		t.Fatalf("conntrack -F: %v: %s", r.Err, r.Stderr)
	}
}

// TestDaemon runs the daemon's tests over every mode of both datapaths.
func TestDaemon(t *testing.T) {
	requireLab(t)
	forEveryFlavor(t, func(t *testing.T, f Flavor) {
		t.Run("health-under-load", func(t *testing.T) { testHealthUnderLoad(t, f) })
		t.Run("on-failure-reset", func(t *testing.T) { testOnFailure(t, f, "reset") })
		t.Run("on-failure-inhibit", func(t *testing.T) { testOnFailure(t, f, "inhibit") })
		t.Run("drain", func(t *testing.T) { testDrain(t, f) })
		t.Run("sorry-server", func(t *testing.T) { testSorryServer(t, f) })
	})
}

// execCheck is a health check the test flips without touching nginx: a backend is down while a
// file named after its address exists in dir.
func execCheck(dir, onFailure string) string {
	return fmt.Sprintf(`health_check: {type: exec, command: [sh, -c, 'test ! -e %s/$SLUICE_BACKEND_ADDRESS'], interval: 200ms, timeout: 150ms, rise: 1, fall: 1, on_failure: %s}`,
		dir, onFailure)
}

// startHeld starts a daemon serving svc in f on a fresh balancer and holds a keep-alive
// connection to svc: it returns the daemon, the connection, the backend that answered it (b1..b3)
// and that backend's address.
func startHeld(t *testing.T, f Flavor, svc Service) (d *daemon, k *keepAlive, held, addr string) {
	t.Helper()
	freshBalancer(t)
	d = startDaemon(t, writeConfig(t, "sluice.yaml", f.Config(svc)))
	k = dialKeepAlive(t, svc.Addr())
	held, err := k.get()
	if err != nil {
		t.Fatal(err)
	}
	return d, k, held, theLab.BackendAddr(backendIndex(held), false).String()
}

// testOnFailure: a backend that fails its check while nginx still serves takes no new flows; with
// on_failure: reset the connection it held fails at its next request, with inhibit it goes on.
func testOnFailure(t *testing.T, f Flavor, onFailure string) {
	dir := t.TempDir()
	svc := webService("maglev", equalPool(false))
	svc.Extra = []string{execCheck(dir, onFailure)}
	d, k, held, addr := startHeld(t, f, svc)
	if err := os.WriteFile(filepath.Join(dir, addr), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the failing backend out of the table", 5*time.Second, func() bool { return d.programmedWeight("web", addr) == 0 })
	if onFailure == "reset" {
		waitFor(t, "the flows_reset event", 5*time.Second, func() bool {
			return strings.Contains(d.cli("events").Stdout, "flows_reset")
		})
		if got, err := k.get(); err == nil {
			t.Fatalf("the connection held on %s still answers (%s) after its flows were reset", held, got)
		} else {
			t.Logf("the held connection fails as it should: %v", err)
		}
	} else if got, err := k.get(); err != nil || got != held {
		t.Fatalf("on_failure: inhibit: the held connection on %s answered %q, %v", held, got, err)
	}
	res := hammer(t, workers, 200, func() (string, error) { return httpOnce(svc.Addr()) })
	res.requireNoFailures(t)
	if res.PerBackend[held] > 0 {
		t.Fatalf("new connections still reach the failing backend %s: %v", held, res.PerBackend)
	}
}

// testDrain: `sluice backend drain` follows the backend's active flows while a connection is
// held, and reports drained once it closes (dsr remembers flows until they idle out, so there
// the drain ends at its timeout).
func testDrain(t *testing.T, f Flavor) {
	svc := webService("maglev", equalPool(false))
	d, k, held, addr := startHeld(t, f, svc)
	timeout := "20s"
	if f.DrainWaitsForIdle {
		timeout = "2s"
	}
	var out strings.Builder
	cmd := exec.Command(sluiceBin, "--socket", d.socket, "backend", "drain", "web", addr, "--timeout", timeout)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	waitFor(t, "weight 0", 5*time.Second, func() bool { return d.programmedWeight("web", addr) == 0 })
	if got, err := k.get(); err != nil || got != held {
		t.Fatalf("a draining backend's connection: %q, %v", got, err)
	}
	time.Sleep(1500 * time.Millisecond) // let the drain report the held flow
	k.c.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("drain: %v\n%s", err, out.String())
		}
	case <-time.After(40 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("drain did not end:\n%s", out.String())
	}
	t.Logf("sluice backend drain:\n%s", out.String())
	want := "drained: no active flows left"
	if f.DrainWaitsForIdle {
		want = "drained: timeout"
	}
	if !strings.Contains(out.String(), "1 active flows") && !f.DrainWaitsForIdle || !strings.Contains(out.String(), want) {
		t.Fatalf("drain output lacks the held flow or %q:\n%s", want, out.String())
	}
	if !strings.Contains(d.cli("events").Stdout, "drained") {
		t.Fatal("no drained event")
	}
}

// testSorryServer: when every backend fails its check, new flows go to the sorry server; when one
// comes back, they leave it again.
func testSorryServer(t *testing.T, f Flavor) {
	dir := t.TempDir()
	svc := webService("maglev", pool(false, map[int]int{1: 1, 2: 1}))
	sorry := theLab.BackendAddr(3, false).String()
	svc.Extra = []string{execCheck(dir, "inhibit"), "fallback: sorry", "sorry_servers: [{address: " + sorry + "}]"}
	freshBalancer(t)
	d := startDaemon(t, writeConfig(t, "sluice.yaml", f.Config(svc)))
	if res := hammer(t, workers, 100, func() (string, error) { return httpOnce(svc.Addr()) }); res.Failures > 0 || res.PerBackend["b3"] > 0 {
		t.Fatalf("with its backends up the sorry server took flows: %v", res)
	}
	for i := 1; i <= 2; i++ {
		if err := os.WriteFile(filepath.Join(dir, theLab.BackendAddr(i, false).String()), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the sorry server weighted", 5*time.Second, func() bool { return d.programmedWeight("web", sorry) > 0 })
	res := hammer(t, workers, 100, func() (string, error) { return httpOnce(svc.Addr()) })
	res.requireNoFailures(t)
	if res.PerBackend["b3"] != res.Requests {
		t.Fatalf("with every backend down, new flows went to %v, want all on the sorry server b3", res.PerBackend)
	}
	if err := os.Remove(filepath.Join(dir, theLab.BackendAddr(1, false).String())); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the sorry server back to standby", 5*time.Second, func() bool { return d.programmedWeight("web", sorry) == 0 })
	if res := hammer(t, workers, 100, func() (string, error) { return httpOnce(svc.Addr()) }); res.Failures > 0 || res.PerBackend["b1"] != res.Requests {
		t.Fatalf("with b1 back, new flows went to %v", res.PerBackend)
	}
}

// TestOneWriterAndCrashRecovery: while a daemon runs in the balancer namespace, a second daemon
// and a one-shot apply there are refused with the daemon's pid and change nothing (apply through
// the daemon's socket still works); a change made through the API survives kill -9 and a restart,
// whose log says the state file won; a SIGHUP goes back to the file.
func TestOneWriterAndCrashRecovery(t *testing.T) {
	requireLab(t)
	f := nftFlavors[0]
	freshBalancer(t)
	t.Cleanup(func() { flush(t) })
	file := writeConfig(t, "sluice.yaml", f.Config(webService("maglev", equalPool(false))))
	d := startDaemon(t, file)
	pid := fmt.Sprint(d.cmd.Process.Pid)
	before := maskVolatile(kernelState(t, f))

	other := writeConfig(t, "other.yaml", f.Config(webService("maglev", pool(false, map[int]int{1: 1}))))
	// A second daemon on its own socket; an apply and a flush on the default socket, where no
	// daemon answers, so that they would program the kernel themselves.
	for _, args := range [][]string{
		{"--socket", filepath.Join(t.TempDir(), "second.sock"), "serve", "-c", other},
		{"apply", "-f", other},
		{"flush"},
	} {
		r := sluice(t, args...)
		if r.Err == nil || !strings.Contains(r.Stderr, "is being written by pid "+pid+" (sluice serve") {
			t.Fatalf("sluice %s while the daemon (pid %s) runs: %v\n%s", strings.Join(args, " "), pid, r.Err, r.Stderr)
		}
		t.Logf("sluice %s: %s", strings.Join(args, " "), strings.TrimSpace(r.Stderr))
	}
	if after := maskVolatile(kernelState(t, f)); after != before {
		t.Fatalf("the refused commands changed the kernel state:\n%s", lineDiff(before, after))
	}
	if r := sluice(t, "--socket", d.socket, "apply", "-f", file); r.Err != nil || !strings.Contains(r.Stdout, "no changes") {
		t.Fatalf("apply through the daemon's socket: %v\n%s%s", r.Err, r.Stdout, r.Stderr)
	}

	b1 := theLab.BackendAddr(1, false).String()
	if r := d.cli("backend", "weight", "web", b1, "3"); r.Err != nil {
		t.Fatalf("backend weight: %v\n%s", r.Err, r.Stderr)
	}
	waitFor(t, "weight 3 programmed", 5*time.Second, func() bool { return d.programmedWeight("web", b1) == 3 })
	d.kill()
	d.start() // takes the namespace's lock: kill -9 freed it
	if w := d.programmedWeight("web", b1); w != 3 {
		t.Fatalf("after kill -9 and a restart the weight set through the API is %d, want 3", w)
	}
	logText, err := os.ReadFile(d.log)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logText), `msg="sluice started" config=`+file+" source=state-file") {
		t.Fatalf("the restarted daemon's log does not say the state file won:\n%s", logText)
	}
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the file's weight after SIGHUP", 5*time.Second, func() bool { return d.programmedWeight("web", b1) == 1 })
}

// TestReloadRefusesAFIFO: a config file replaced by a FIFO hung a SIGHUP reload (and every
// `sluice reload` after it, until the API's connection slots were gone). The reload is refused at
// once, naming the file; the daemon keeps its running config and answers the next reload.
func TestReloadRefusesAFIFO(t *testing.T) {
	requireLab(t)
	f := nftFlavors[0]
	freshBalancer(t)
	t.Cleanup(func() { flush(t) })
	file := writeConfig(t, "sluice.yaml", f.Config(webService("maglev", equalPool(false))))
	d := startDaemon(t, file)
	text, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(file, 0o644); err != nil {
		t.Fatal(err)
	}
	refusal := file + ": is a FIFO, not a regular file"
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the SIGHUP reload refused", 10*time.Second, func() bool {
		logText, err := os.ReadFile(d.log)
		return err == nil && strings.Contains(string(logText), "reload rejected") && strings.Contains(string(logText), refusal)
	})
	for range 3 {
		if r := d.cli("reload"); r.Err == nil || !strings.Contains(r.Stderr, refusal) {
			t.Fatalf("sluice reload of a FIFO: %v, want %q\n%s%s", r.Err, refusal, r.Stdout, r.Stderr)
		}
	}
	b1 := theLab.BackendAddr(1, false).String()
	if w := d.programmedWeight("web", b1); w != 1 {
		t.Fatalf("after the refused reloads b1's weight is %d, want the running config's 1", w)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, text, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := d.cli("reload"); r.Err != nil {
		t.Fatalf("sluice reload of the file put back: %v\n%s%s", r.Err, r.Stdout, r.Stderr)
	}
}
