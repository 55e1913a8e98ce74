package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/lab"
)

// The active/backup pair: fleet nodes 1 and 2 run the same config without BGP, keepalived's
// VRRP holds the address the router routes the VIPs to (vrrpGateway) on the master, and a
// track_script running `sluice node check` makes a node that should not take traffic give it up.
var vrrpGateway = netip.MustParseAddr("10.91.3.254")

// vrrpInstance is a VRRP address the pair's master holds (lab.VRRPInstance).
type vrrpInstance lab.VRRPInstance

// frontInstance holds the address the router routes the VIPs to.
var frontInstance = vrrpInstance{"front", "eth0", 91, vrrpGateway}

// keepalivedConfig is the keepalived.conf of pair node i (lab.PairKeepalivedConfig) asking the
// daemon behind socket, holding instances.
func keepalivedConfig(socket string, i int, instances ...vrrpInstance) string {
	ins := make([]lab.VRRPInstance, len(instances))
	for j, in := range instances {
		ins[j] = lab.VRRPInstance(in)
	}
	return lab.PairKeepalivedConfig(sluiceBin, socket, i, ins...)
}

// startPair starts the pair: the router routes the VIPs to the front VRRP address, fleet nodes
// 1 and 2 run the daemon with config(i) and, once it is ready (`node check`), keepalived holding
// instances; it returns once node 1 holds the addresses. Everything stops when the test ends.
func startPair(t *testing.T, config func(i int) string, instances ...vrrpInstance) []*daemon {
	t.Helper()
	if hops := nextHops(t, fleetVIP4); len(hops) != 0 {
		t.Fatalf("the router routes %s over BGP already: %v", fleetVIP4, hops)
	}
	if err := theFleet.RouteVIPsVia(vrrpGateway, netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run(t, "ip", "-n", theFleet.RouterNS(), "route", "del", lab.VIPNet4) })
	nodes := make([]*daemon, 2)
	for i := range nodes {
		nodes[i] = startDaemonIn(t, theFleet.BalancerNSOf(i+1), writeConfig(t, fmt.Sprintf("pair%d.yaml", i+1), config(i+1)))
	}
	t.Cleanup(func() {
		for i := 1; i <= 2; i++ {
			_ = theFleet.StopKeepalived(i)
		}
		for i, d := range nodes {
			d.stop()
			run(t, sluiceBin, "--netns", theFleet.BalancerNSOf(i+1), "flush")
			// The nodes' conntrack entries (their own and the replicated ones) would otherwise
			// translate the next test's connections that reuse a client port.
			run(t, "ip", "netns", "exec", theFleet.BalancerNSOf(i+1), "conntrack", "-F")
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, d := range nodes {
		// A node with a sync section is ready once it has its initial sync (or its timeout passed).
		waitFor(t, fmt.Sprintf("node %d ready", i+1), 20*time.Second, func() bool { return d.cli("node", "check").Err == nil })
		if err := theFleet.StartKeepalived(ctx, i+1, keepalivedConfig(d.socket, i+1, instances...)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "node 1 holds the VRRP addresses", 15*time.Second, func() bool { return vrrpHolder(t) == 1 })
	return nodes
}

// pairConfig is the one config both nodes run: the DSR web service, no bgp section.
func pairConfig(datapath string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "datapath: %s\nservices:\n  - name: web\n    vip: %s\n    port: 80\n    mode: dsr\n    flow_timeout: 3s\n", datapath, fleetVIP4)
	fmt.Fprintf(&b, "    health_check: {type: tcp, interval: %s, timeout: %s, rise: %d, fall: %d}\n    backends:\n",
		checkInterval, checkTimeout, checkRise, checkFall)
	for i := 1; i <= labBackends; i++ {
		fmt.Fprintf(&b, "      - address: %s\n", theFleet.BackendAddr(i, false))
	}
	return b.String()
}

// vrrpHolder is the pair node (1 or 2) whose eth0 holds the VRRP address, 0 for none, -1 for both.
func vrrpHolder(t *testing.T) int {
	t.Helper()
	holder := 0
	for i := 1; i <= 2; i++ {
		r := run(t, "ip", "-n", theFleet.BalancerNSOf(i), "-j", "addr", "show", "dev", "eth0")
		if r.Err != nil {
			t.Fatalf("ip addr: %v: %s", r.Err, r.Stderr)
		}
		var links []struct {
			AddrInfo []struct {
				Local string `json:"local"`
			} `json:"addr_info"`
		}
		if err := json.Unmarshal([]byte(r.Stdout), &links); err != nil {
			t.Fatal(err)
		}
		for _, l := range links {
			if slices.ContainsFunc(l.AddrInfo, func(a struct {
				Local string `json:"local"`
			}) bool {
				return a.Local == vrrpGateway.String()
			}) {
				if holder != 0 {
					return -1
				}
				holder = i
			}
		}
	}
	return holder
}

// TestKeepalivedPair runs Sluice as an active/backup pair under keepalived: the master holds the
// VRRP address; a drained node gives it up through the track script; and when the master dies
// under load the backup takes over, long-lived DSR connections keep their backend and the
// failover time and failed requests are reported.
func TestKeepalivedPair(t *testing.T) {
	fleetLab(t)
	for _, dp := range []string{"nft", "ebpf"} {
		t.Run(dp, func(t *testing.T) { testKeepalivedPair(t, dp) })
	}
}

func testKeepalivedPair(t *testing.T, datapath string) {
	text := pairConfig(datapath)
	nodes := startPair(t, func(int) string { return text }, frontInstance)
	res := fleetHammer(t, 4, 200, func() (string, error) { return httpOnce(netip.AddrPortFrom(fleetVIP4, 80)) })
	res.requireNoFailures(t)

	// A drained node fails its track script and gives the address up; undrained, it takes it back.
	if r := nodes[0].cli("node", "drain", "--no-wait"); r.Err != nil {
		t.Fatalf("node drain: %v\n%s", r.Err, r.Stderr)
	}
	moved := waitFor(t, "node 2 holds the address after node 1's drain", 15*time.Second, func() bool { return vrrpHolder(t) == 2 })
	t.Logf("%s: node 1 drained: the track script moved the address to node 2 in %v", datapath, moved.Round(time.Millisecond))
	res = fleetHammer(t, 4, 200, func() (string, error) { return httpOnce(netip.AddrPortFrom(fleetVIP4, 80)) })
	res.requireNoFailures(t)
	if r := nodes[0].cli("node", "undrain"); r.Err != nil {
		t.Fatalf("node undrain: %v\n%s", r.Err, r.Stderr)
	}
	waitFor(t, "node 1 holds the address again", 15*time.Second, func() bool { return vrrpHolder(t) == 1 })

	// The master dies (cut off the network, no VRRP goodbye) under load.
	conns := startLongLived(t, longLivedConns, netip.AddrPortFrom(fleetVIP4, 80))
	load := startLoadIn(t, theFleet, 4, func() (string, error) { return httpOnce(netip.AddrPortFrom(fleetVIP4, 80)) })
	time.Sleep(time.Second)
	cut := time.Now()
	if err := theFleet.CutBalancer(1); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = theFleet.RestoreBalancer(1) }()
	failover := waitFor(t, "node 2 takes the address over", 15*time.Second, func() bool { return vrrpHolder(t) == 2 })
	time.Sleep(2 * time.Second)
	load.finish()
	conns.requireKept(t)
	total, failed, _, errs := load.since(cut)
	after := cut.Add(failover + 500*time.Millisecond)
	afterN, afterFailed, perBackend, afterErrs := load.since(after)
	t.Logf("%s: master cut: node 2 took the address over after %v; new connections: %d of %d failed from the cut (%v), %d of %d from 0.5 s after the takeover (%v)",
		datapath, failover.Round(time.Millisecond), failed, total, errs, afterFailed, afterN, perBackend)
	if afterFailed > 0 {
		t.Errorf("%d connections failed after the backup took over: %v", afterFailed, afterErrs)
	}
	if err := theFleet.RestoreBalancer(1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "node 1 takes the address back", 15*time.Second, func() bool { return vrrpHolder(t) == 1 })
}
