package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/lab"
)

// The fleet lab: a BIRD router spreading the VIPs over fleetNodes balancers by ECMP.
const (
	fleetKind  = "slf"
	fleetNodes = 3
	// fleetHoldTime is the BGP hold time the nodes offer: the router notices a dead node after
	// at most this long (BGP's smallest).
	fleetHoldTime = 3 * time.Second
)

func newFleetLab(sluiceLab string) *lab.Lab {
	l := lab.New(runPrefix(fleetKind), labBackends)
	l.Balancers = fleetNodes
	l.UDPResponderCmd = lab.LabUDPResponder(sluiceLab)
	return l
}

var (
	fleetOnce sync.Once
	theFleet  *lab.Lab
	fleetErr  error
)

// fleetLab brings the fleet lab up once for the run (the supervisor tears it down).
func fleetLab(t *testing.T) *lab.Lab {
	t.Helper()
	requireLab(t)
	fleetOnce.Do(func() {
		l := newFleetLab(sluiceLabBin)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		start := time.Now()
		if fleetErr = l.Up(ctx); fleetErr == nil {
			theFleet = l
			t.Logf("fleet lab %s up in %v", l.Prefix, time.Since(start).Round(time.Millisecond))
		}
	})
	if fleetErr != nil {
		t.Fatalf("fleet lab: %v", fleetErr)
	}
	return theFleet
}

var (
	fleetVIP4 = netip.MustParseAddr(lab.VIP4)
	fleetVIP6 = netip.MustParseAddr(lab.VIP6)
	// fleetFullNATVIP carries a fullnat service beside the DSR ones.
	fleetFullNATVIP = netip.MustParseAddr("10.91.9.101")
)

// fleetConfig is the one config every node runs: BGP to the router over IPv4 and IPv6, the DSR
// web service and its IPv6 twin, and a fullnat one, each with a health check. DSR flows are idle
// after 3 s, so that a drained node's flows run out quickly.
func fleetConfig(datapath string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `datapath: %s
bgp:
  asn: %d
  shutdown_grace: 1s
  peers:
    - {address: %s, asn: %d, hold_time: %s}
    - {address: %s, asn: %d, hold_time: %s}
services:
`, datapath, lab.BalancerASN, theFleet.RouterFrontAddr(false), lab.RouterASN, fleetHoldTime,
		theFleet.RouterFrontAddr(true), lab.RouterASN, fleetHoldTime)
	service := func(name string, vip netip.Addr, mode string, v6 bool) {
		fmt.Fprintf(&b, "  - name: %s\n    vip: %s\n    port: 80\n    mode: %s\n", name, vip, mode)
		if mode == "dsr" {
			b.WriteString("    flow_timeout: 3s\n")
		}
		fmt.Fprintf(&b, "    health_check: {type: tcp, interval: %s, timeout: %s, rise: %d, fall: %d}\n    backends:\n",
			checkInterval, checkTimeout, checkRise, checkFall)
		for i := 1; i <= labBackends; i++ {
			fmt.Fprintf(&b, "      - address: %s\n", theFleet.BackendAddr(i, v6))
		}
	}
	service("web", fleetVIP4, "dsr", false)
	service("web6", fleetVIP6, "dsr", true)
	service("api", fleetFullNATVIP, "fullnat", false)
	return b.String()
}

// fleetDaemons starts one daemon per node, all on the same config.
func fleetDaemons(t *testing.T, datapath string) []*daemon {
	t.Helper()
	text := fleetConfig(datapath)
	nodes := make([]*daemon, fleetNodes)
	for i := range nodes {
		nodes[i] = startDaemonIn(t, theFleet.BalancerNSOf(i+1), writeConfig(t, fmt.Sprintf("node%d.yaml", i+1), text))
	}
	return nodes
}

// nextHops is the router's ECMP set for a VIP.
func nextHops(t *testing.T, vip netip.Addr) []netip.Addr {
	t.Helper()
	hops, err := theFleet.RouterNextHops(netip.PrefixFrom(vip, vip.BitLen()))
	if err != nil {
		t.Fatal(err)
	}
	return hops
}

// frontAddrs are the front addresses of the given nodes (1-based), the router's next hops for
// a VIP they announce.
func frontAddrs(v6 bool, nodes ...int) []netip.Addr {
	var out []netip.Addr
	for _, i := range nodes {
		out = append(out, theFleet.BalancerFrontAddr(i, v6))
	}
	return out
}

// waitNextHops waits until the router routes vip over exactly want, and returns how long it took.
func waitNextHops(t *testing.T, vip netip.Addr, limit time.Duration, want ...netip.Addr) time.Duration {
	t.Helper()
	var got []netip.Addr
	took := waitFor(t, fmt.Sprintf("router: %s via %v", vip, want), limit, func() bool {
		got = nextHops(t, vip)
		return fmt.Sprint(got) == fmt.Sprint(want)
	})
	return took
}

// inFleetClient runs fn in the fleet's client namespace.
func inFleetClient(fn func() error) error { return theFleet.Do(theFleet.ClientNS(), fn) }

// TestFleet runs three Sluice nodes behind a BIRD router on each datapath: the router learns the
// VIPs from the nodes only, every node picks the same backend for a flow, long-lived DSR
// connections survive a node's death, a drain loses no request, and a node whose backends all
// fail its checks withdraws.
func TestFleet(t *testing.T) {
	fleetLab(t)
	for _, dp := range []string{"nft", "ebpf"} {
		t.Run(dp, func(t *testing.T) { testFleet(t, dp) })
	}
}

func testFleet(t *testing.T, datapath string) {
	all := frontAddrs(false, 1, 2, 3)
	if hops := nextHops(t, fleetVIP4); len(hops) != 0 {
		t.Fatalf("the router routes %s before any node runs: %v", fleetVIP4, hops)
	}
	nodes := fleetDaemons(t, datapath)
	took := waitNextHops(t, fleetVIP4, 30*time.Second, all...)
	t.Logf("%s: the router routes %s over %d nodes %v after the daemons started", datapath, fleetVIP4, len(all), took.Round(time.Millisecond))
	waitNextHops(t, fleetVIP6, 30*time.Second, frontAddrs(true, 1, 2, 3)...)
	waitNextHops(t, fleetFullNATVIP, 30*time.Second, all...)
	requireBGPView(t, nodes[0])
	t.Run("reload-keeps-sessions", func(t *testing.T) { testFleetReload(t, nodes[0]) })

	t.Run("same-backend-on-every-node", func(t *testing.T) { testFleetConsistency(t, datapath) })
	t.Run("fullnat", func(t *testing.T) {
		res := fleetHammer(t, 4, 200, func() (string, error) { return httpOnce(netip.AddrPortFrom(fleetFullNATVIP, 80)) })
		t.Logf("fullnat through %d nodes: %v", fleetNodes, res)
		res.requireNoFailures(t)
	})
	t.Run("ipv6", func(t *testing.T) {
		res := fleetHammer(t, 4, 200, func() (string, error) { return httpOnce(netip.AddrPortFrom(fleetVIP6, 80)) })
		t.Logf("ipv6 dsr through %d nodes: %v", fleetNodes, res)
		res.requireNoFailures(t)
	})
	t.Run("node-failure", func(t *testing.T) { testNodeFailure(t, nodes) })
	t.Run("node-drain", func(t *testing.T) { testNodeDrain(t, nodes) })
	t.Run("health-withdraws", func(t *testing.T) { testHealthWithdraws(t, nodes) })

	// Stopping the daemons withdraws the VIPs (shutdown grace 1 s).
	for _, d := range nodes {
		d.stop()
	}
	waitNextHops(t, fleetVIP4, 15*time.Second)
	for i := 1; i <= fleetNodes; i++ {
		mustSluice(t, "--netns", theFleet.BalancerNSOf(i), "flush")
	}
}

// requireBGPView checks what `sluice bgp` shows: two established sessions and the VIPs announced.
func requireBGPView(t *testing.T, d *daemon) {
	t.Helper()
	var view struct {
		Peers []struct {
			Address      string `json:"address"`
			State        string `json:"state"`
			PrefixesSent int    `json:"prefixes_sent"`
		} `json:"peers"`
		VIPs []struct {
			VIP       string `json:"vip"`
			Announced bool   `json:"announced"`
			Reason    string `json:"reason"`
		} `json:"vips"`
	}
	waitFor(t, "both sessions established", 30*time.Second, func() bool {
		d.mustJSON(&view, "bgp")
		up := 0
		for _, p := range view.Peers {
			if p.State == "established" {
				up++
			}
		}
		return up == 2
	})
	if len(view.Peers) != 2 {
		t.Fatalf("sluice bgp shows %d peers, want 2: %+v", len(view.Peers), view)
	}
	for _, p := range view.Peers {
		if p.State != "established" {
			t.Errorf("peer %s: %s", p.Address, p.State)
		}
		if p.PrefixesSent == 0 {
			t.Errorf("peer %s: no prefix sent", p.Address)
		}
	}
	for _, v := range view.VIPs {
		if !v.Announced {
			t.Errorf("vip %s not announced: %s", v.VIP, v.Reason)
		}
	}
	if table := d.cli("bgp"); table.Err != nil || !strings.Contains(table.Stdout, "established") {
		t.Errorf("sluice bgp: %v\n%s%s", table.Err, table.Stdout, table.Stderr)
	}
}

// fleetHammer is hammer from the fleet's client.
func fleetHammer(t *testing.T, workers, n int, once func() (string, error)) *tally {
	t.Helper()
	total := &tally{PerBackend: map[string]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	per := n / workers
	for range workers {
		wg.Go(func() {
			part := &tally{PerBackend: map[string]int{}}
			err := inFleetClient(func() error {
				for range per {
					t0 := time.Now()
					backend, err := once()
					part.add(backend, err, time.Since(t0))
				}
				return nil
			})
			if err != nil {
				part.add("", err, 0)
			}
			mu.Lock()
			total.merge(part)
			mu.Unlock()
		})
	}
	wg.Wait()
	total.Elapsed = time.Since(start)
	return total
}

// whichBackend asks node i which backend it gives the flow from src to the web VIP.
func whichBackend(t *testing.T, node int, src netip.AddrPort) string {
	t.Helper()
	r := sluice(t, "--netns", theFleet.BalancerNSOf(node), "which", netip.AddrPortFrom(fleetVIP4, 80).String(), src.String(), "-o", "json")
	if r.Err != nil {
		t.Fatalf("sluice which on node %d: %v\n%s", node, r.Err, r.Stderr)
	}
	var c struct {
		Backend string `json:"backend"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &c); err != nil || c.Backend == "" {
		t.Fatalf("sluice which on node %d: %v\n%s", node, err, r.Stdout)
	}
	return c.Backend
}

// testFleetConsistency asks every node which backend it gives each of a set of flows (sluice
// which: the ebpf program on a synthetic packet, or the nft tables and the kernel's jhash), then
// makes those very flows through the router and checks the backend that answered.
func testFleetConsistency(t *testing.T, datapath string) {
	const flows = 24
	firstPort := 27000 // below the ephemeral range: no other connection left a flow from these ports
	if datapath == "ebpf" {
		firstPort += 100 // other 4-tuples than the nft run's, which the backends may hold in TIME_WAIT
	}
	client := theFleet.ClientAddr(false)
	backendName := map[string]string{}
	for i := 1; i <= labBackends; i++ {
		backendName[theFleet.BackendAddr(i, false).String()] = lab.BackendName(i)
	}
	predicted := make([]string, flows)
	for f := range flows {
		src := netip.AddrPortFrom(client, uint16(firstPort+f))
		answers := make([]string, fleetNodes)
		var wg sync.WaitGroup
		for n := range fleetNodes {
			wg.Go(func() { answers[n] = whichBackend(t, n+1, src) })
		}
		wg.Wait()
		for n := 1; n < fleetNodes; n++ {
			if answers[n] != answers[0] {
				t.Errorf("flow from %s: node 1 says %s, node %d says %s", src, answers[0], n+1, answers[n])
			}
		}
		predicted[f] = backendName[strings.Split(answers[0], ":")[0]]
	}
	var mismatches []string
	if err := inFleetClient(func() error {
		for f := range flows {
			got, err := httpFrom(netip.AddrPortFrom(fleetVIP4, 80), firstPort+f)
			if err != nil {
				return fmt.Errorf("flow from port %d: %w", firstPort+f, err)
			}
			if got != predicted[f] {
				mismatches = append(mismatches, fmt.Sprintf("port %d: predicted %s, answered by %s", firstPort+f, predicted[f], got))
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(mismatches) > 0 {
		t.Errorf("%s: %d of %d flows not answered by the backend every node predicted:\n  %s", datapath, len(mismatches), flows, strings.Join(mismatches, "\n  "))
	}
	t.Logf("%s: %d flows, the same backend on all %d nodes, and each answered by it", datapath, flows, fleetNodes)
}

// Long-lived connections of the failure and drain tests: each makes a request every
// longLivedPause, and a request may take up to longLivedTimeout, long enough for TCP to retransmit
// over a router that has not yet noticed a dead node (hold time 3 s, retransmissions at 0.2, 0.6,
// 1.4, 3 and 6.2 s).
const (
	longLivedConns   = 30
	longLivedPause   = 100 * time.Millisecond
	longLivedTimeout = 20 * time.Second
)

// longLived is one keep-alive connection's record.
type longLived struct {
	requests   int
	backends   map[string]int
	err        error // the first failure; the connection stops there
	maxLatency time.Duration
}

// longLivedLoad is a set of long-lived connections to one address.
type longLivedLoad struct {
	background
	mu    sync.Mutex
	conns []*longLived
}

// startLongLived opens n keep-alive connections from the fleet's client to to and makes requests
// on each until finish (or loadDuration).
func startLongLived(t *testing.T, n int, to netip.AddrPort) *longLivedLoad {
	t.Helper()
	l := &longLivedLoad{background: background{stop: make(chan struct{})}}
	deadline := time.Now().Add(loadDuration)
	for range n {
		var k *keepAlive
		if err := inFleetClient(func() error {
			c, err := (&net.Dialer{Timeout: dialTimeout}).Dial("tcp", to.String())
			if err == nil {
				k = &keepAlive{c: c, br: bufio.NewReader(c), timeout: longLivedTimeout}
			}
			return err
		}); err != nil {
			t.Fatalf("dial %s: %v", to, err)
		}
		rec := &longLived{backends: map[string]int{}}
		l.conns = append(l.conns, rec)
		l.wg.Go(func() {
			defer k.c.Close()
			for time.Now().Before(deadline) {
				t0 := time.Now()
				backend, err := k.get()
				l.mu.Lock()
				rec.requests++
				rec.maxLatency = max(rec.maxLatency, time.Since(t0))
				if err != nil {
					rec.err = err
				} else {
					rec.backends[backend]++
				}
				l.mu.Unlock()
				if err != nil {
					return
				}
				select {
				case <-l.stop:
					return
				case <-time.After(longLivedPause):
				}
			}
		})
	}
	t.Cleanup(l.finish)
	return l
}

// requireKept stops the connections and fails t for each one that broke or changed backend; it
// returns the slowest request.
func (l *longLivedLoad) requireKept(t *testing.T) time.Duration {
	t.Helper()
	l.finish()
	var slowest time.Duration
	broken, moved, requests := 0, 0, 0
	for i, c := range l.conns {
		requests += c.requests
		slowest = max(slowest, c.maxLatency)
		switch {
		case c.err != nil:
			broken++
			t.Errorf("long-lived connection %d broke after %d requests: %v", i, c.requests, c.err)
		case len(c.backends) != 1:
			moved++
			t.Errorf("long-lived connection %d changed backend: %v", i, c.backends)
		}
	}
	t.Logf("%d long-lived connections, %d requests: %d broken, %d changed backend, slowest request %v",
		len(l.conns), requests, broken, moved, slowest.Round(time.Millisecond))
	return slowest
}

// webPackets is the packets node d forwarded to the web service's backends.
func webPackets(t *testing.T, d *daemon) uint64 { return servicePackets(t, d, "web") }

// servicePackets is the packets node d forwarded to a service's backends.
func servicePackets(t *testing.T, d *daemon, service string) uint64 {
	t.Helper()
	var services []struct {
		Name     string `json:"name"`
		Backends []struct {
			Packets uint64 `json:"packets"`
		} `json:"backends"`
	}
	d.mustJSON(&services, "list")
	var n uint64
	for _, s := range services {
		if s.Name == service {
			for _, b := range s.Backends {
				n += b.Packets
			}
		}
	}
	return n
}

// requireSpread starts long-lived connections and checks that every node carries some of them
// (with no other traffic running).
func requireSpread(t *testing.T, nodes []*daemon) *longLivedLoad {
	t.Helper()
	before := make([]uint64, len(nodes))
	for i, d := range nodes {
		before[i] = webPackets(t, d)
	}
	conns := startLongLived(t, longLivedConns, netip.AddrPortFrom(fleetVIP4, 80))
	time.Sleep(time.Second)
	for i, d := range nodes {
		if webPackets(t, d) == before[i] {
			t.Fatalf("node %d forwarded none of %d long-lived connections: ECMP does not spread them", i+1, longLivedConns)
		}
	}
	return conns
}

// fleetChurn is one-request connections to the web VIP from the fleet's client, as fast as they go.
func fleetChurn(t *testing.T) *steadyLoad {
	return startLoadIn(t, theFleet, 4, func() (string, error) { return httpOnce(netip.AddrPortFrom(fleetVIP4, 80)) })
}

// testNodeFailure cuts node 2 off the network under load: the router reconverges by the hold
// timer, every long-lived DSR connection keeps its backend through another node, and new
// connections fail only until the router reconverged.
func testNodeFailure(t *testing.T, nodes []*daemon) {
	conns := requireSpread(t, nodes) // before the churn: node 2 carries long-lived connections
	load := fleetChurn(t)
	time.Sleep(200 * time.Millisecond)
	cut := time.Now()
	if err := theFleet.CutBalancer(2); err != nil {
		t.Fatal(err)
	}
	cutPackets := webPackets(t, nodes[1])
	restored := false
	defer func() {
		if !restored {
			_ = theFleet.RestoreBalancer(2)
		}
	}()
	reconverged := waitNextHops(t, fleetVIP4, 30*time.Second, frontAddrs(false, 1, 3)...)
	after := cut.Add(reconverged + 100*time.Millisecond)
	time.Sleep(2 * time.Second)
	load.finish()
	if n := webPackets(t, nodes[1]); n != cutPackets {
		t.Errorf("node 2 forwarded %d packets while cut off: the test cut nothing", n-cutPackets)
	}
	slowest := conns.requireKept(t) // node 2's connections went on through the others
	total, failed, _, errs := load.since(cut)
	afterN, afterFailed, perBackend, afterErrs := load.since(after)
	t.Logf("node 2 cut: the router reconverged after %v; new connections: %d of %d failed from the cut, %d of %d after reconvergence (%v); slowest long-lived request %v; first errors %v",
		reconverged.Round(time.Millisecond), failed, total, afterFailed, afterN, perBackend, slowest.Round(time.Millisecond), errs)
	if afterFailed > 0 {
		t.Errorf("%d new connections failed after the router reconverged: %v", afterFailed, afterErrs)
	}
	if err := theFleet.RestoreBalancer(2); err != nil {
		t.Fatal(err)
	}
	restored = true
	back := waitNextHops(t, fleetVIP4, 60*time.Second, frontAddrs(false, 1, 2, 3)...)
	t.Logf("node 2 restored: announced again after %v", back.Round(time.Millisecond))
}

// testNodeDrain drains node 1 under load: it withdraws every VIP, no request fails, and it
// reports drained once its flows are idle; undrained, it announces again.
func testNodeDrain(t *testing.T, nodes []*daemon) {
	conns := requireSpread(t, nodes)
	load := fleetChurn(t)
	start := time.Now()
	if r := nodes[0].cli("node", "drain", "--no-wait", "--timeout", "1m"); r.Err != nil {
		t.Fatalf("node drain: %v\n%s", r.Err, r.Stderr)
	}
	undrained := false
	t.Cleanup(func() { // the next tests need node 1 back, whatever this one found
		if !undrained {
			nodes[0].cli("node", "undrain")
		}
	})
	withdrawn := waitNextHops(t, fleetVIP4, 15*time.Second, frontAddrs(false, 2, 3)...)
	time.Sleep(2 * time.Second)
	load.finish()
	conns.requireKept(t)
	n, failed, perBackend, errs := load.since(start.Add(-time.Second))
	t.Logf("node 1 drained: withdrawn from the router after %v; %d of %d requests failed (%v)", withdrawn.Round(time.Millisecond), failed, n, perBackend)
	if failed > 0 {
		t.Errorf("%d requests failed during the drain: %v", failed, errs)
	}
	var state struct {
		State  string `json:"state"`
		Reason string `json:"reason"`
	}
	for waited := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		if nodes[0].mustJSON(&state, "node", "status"); state.State == "drained" {
			break
		}
		if time.Since(waited) > 45*time.Second {
			var flows strings.Builder
			for _, svc := range []string{"web", "web6", "api"} {
				fmt.Fprintf(&flows, "%s:\n%s", svc, nodes[0].cli("flows", svc).Stdout)
			}
			t.Fatalf("node 1 not drained after 45 s (%s):\n%s\nits flows:\n%s", state.Reason, nodes[0].cli("list").Stdout, flows.String())
		}
	}
	t.Logf("node 1 reported drained %v after the drain started: %s", time.Since(start).Round(time.Second), state.Reason)
	undrained = true
	if r := nodes[0].cli("node", "undrain"); r.Err != nil {
		t.Fatalf("node undrain: %v\n%s", r.Err, r.Stderr)
	}
	waitNextHops(t, fleetVIP4, 15*time.Second, frontAddrs(false, 1, 2, 3)...)
}

// testHealthWithdraws makes node 3's health checks fail (its own packets to the backends' port 80
// dropped; forwarded traffic is untouched): it withdraws, and the other nodes take every new
// connection.
func testHealthWithdraws(t *testing.T, nodes []*daemon) {
	ns := theFleet.BalancerNSOf(3)
	for _, cmd := range []string{
		"add table inet e2e-block",
		"add chain inet e2e-block out { type filter hook output priority 0 ; }",
		"add rule inet e2e-block out tcp dport 80 drop",
	} {
		if r := run(t, "ip", "netns", "exec", ns, "nft", cmd); r.Err != nil {
			t.Fatalf("nft %s: %v: %s", cmd, r.Err, r.Stderr)
		}
	}
	unblocked := false
	unblock := func() {
		if !unblocked {
			run(t, "ip", "netns", "exec", ns, "nft", "delete table inet e2e-block")
			unblocked = true
		}
	}
	defer unblock()
	withdrawn := waitNextHops(t, fleetVIP4, 30*time.Second, frontAddrs(false, 1, 2)...)
	// Each VIP's backends are probed on their own, so the other VIPs follow within a probe or two.
	type vipView struct {
		VIP       string `json:"vip"`
		Announced bool   `json:"announced"`
		Reason    string `json:"reason"`
	}
	var view struct {
		VIPs []vipView `json:"vips"`
	}
	allWithdrawn := func() bool {
		nodes[2].mustJSON(&view, "bgp")
		return !slices.ContainsFunc(view.VIPs, func(v vipView) bool { return v.Announced })
	}
	waitFor(t, "node 3 withdraws every VIP", 10*time.Second, allWithdrawn)
	for _, v := range view.VIPs {
		if !strings.Contains(v.Reason, "can take new flows") {
			t.Errorf("node 3, vip %s: withdrawn, %q", v.VIP, v.Reason)
		}
	}
	after := time.Now()
	load := fleetChurn(t)
	time.Sleep(2 * time.Second)
	load.finish()
	n, failed, perBackend, errs := load.since(after)
	t.Logf("node 3's checks fail: withdrawn after %v; then %d of %d new connections failed (%v)", withdrawn.Round(time.Millisecond), failed, n, perBackend)
	if failed > 0 {
		t.Errorf("%d new connections failed after node 3 withdrew: %v", failed, errs)
	}
	unblock()
	waitNextHops(t, fleetVIP4, 30*time.Second, frontAddrs(false, 1, 2, 3)...)
}

// testFleetReload adds a community to node 1's announcements by a reload: the router receives it,
// and the session is not restarted.
func testFleetReload(t *testing.T, d *daemon) {
	type peers struct {
		Peers []struct {
			Address string    `json:"address"`
			Since   time.Time `json:"since"`
			Flaps   int       `json:"flaps"`
		} `json:"peers"`
	}
	var before, after peers
	d.mustJSON(&before, "bgp")
	text, err := os.ReadFile(d.config)
	if err != nil {
		t.Fatal(err)
	}
	tagged := strings.Replace(string(text), "hold_time: 3s}", "hold_time: 3s, communities: [\"65100:42\"]}", 1)
	if err := os.WriteFile(d.config, []byte(tagged), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := d.cli("reload"); r.Err != nil {
		t.Fatalf("reload: %v\n%s", r.Err, r.Stderr)
	}
	waitFor(t, "the router sees the community", 15*time.Second, func() bool {
		out, err := theFleet.Birdc(context.Background(), "show", "route", "for", lab.VIP4, "all")
		return err == nil && strings.Contains(out, "(65100,42)")
	})
	d.mustJSON(&after, "bgp")
	for i := range before.Peers {
		if !after.Peers[i].Since.Equal(before.Peers[i].Since) || after.Peers[i].Flaps != before.Peers[i].Flaps {
			t.Errorf("peer %s restarted by a reload that changed only attributes: %+v -> %+v", before.Peers[i].Address, before.Peers[i], after.Peers[i])
		}
	}
}
