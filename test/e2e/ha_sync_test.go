package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The nat pair: the backends send their replies to the clients through a second VRRP address,
// on the backends' side (vrrpBackGateway), which keepalived moves with the front one (a sync
// group); the nodes replicate their flows over the backends' side (the sync section).
var vrrpBackGateway = netip.MustParseAddr("10.91.2.254")

// backInstance holds the backends' return gateway.
var backInstance = vrrpInstance{"back", "eth1", 92, vrrpBackGateway}

// natPairConfig is node i's config: the web service in nat or fullnat mode (translated to the
// backends'-side VRRP address, which moves with the flows), its flows replicated to the other
// node over the backends' side (none without a secretFile).
func natPairConfig(datapath, mode string, i int, secretFile string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "datapath: %s\n", datapath)
	if secretFile != "" {
		b.WriteString(pairSync(i, secretFile))
	}
	fmt.Fprintf(&b, "services:\n  - name: web\n    vip: %s\n    port: 80\n    mode: %s\n", fleetVIP4, mode)
	if mode == "fullnat" {
		fmt.Fprintf(&b, "    fullnat_source: %s\n", vrrpBackGateway)
	}
	b.WriteString(checkedBackends())
	return b.String()
}

// pairSync is fleet node i's sync section, replicating to the other of nodes 1 and 2 over the
// backends' side.
func pairSync(i int, secretFile string) string {
	return fmt.Sprintf("sync:\n  interface: eth1\n  address: %s\n  peers: [%s]\n  secret_file: %s\n  initial_sync_timeout: 3s\n",
		theFleet.BalancerBackSideAddr(i, false), theFleet.BalancerBackSideAddr(3-i, false), secretFile)
}

// checkedBackends are a service's tcp health check and the lab's IPv4 backends, as YAML lines.
func checkedBackends() string {
	var b strings.Builder
	fmt.Fprintf(&b, "    health_check: {type: tcp, interval: %s, timeout: %s, rise: %d, fall: %d}\n    backends:\n",
		checkInterval, checkTimeout, checkRise, checkFall)
	for j := 1; j <= labBackends; j++ {
		fmt.Fprintf(&b, "      - address: %s\n", theFleet.BackendAddr(j, false))
	}
	return b.String()
}

// TestKeepalivedPairNATTakeover: a nat or fullnat pair whose nodes replicate their flows (conntrackd on nft,
// the flow tables on ebpf, both run by the daemons from their sync section) keeps every long-lived
// connection across a takeover, also when the backends changed since the flows began: the backup
// already holds the master's flows when the traffic arrives, with no notify script. (Without the
// backend change, Maglev alone would hash a mid-flow packet on the new master to the backend the
// old one chose; the weight change makes the test depend on the replicated state.)
func TestKeepalivedPairNATTakeover(t *testing.T) {
	fleetLab(t)
	for _, dp := range []string{"nft", "ebpf"} {
		for _, mode := range []string{"nat", "fullnat"} {
			t.Run(dp+"-"+mode, func(t *testing.T) { testNATTakeover(t, dp, mode) })
		}
	}
}

func testNATTakeover(t *testing.T, datapath, mode string) {
	routeClientViaBackGateway(t, mode)
	secret := filepath.Join(t.TempDir(), "sync.key")
	if err := os.WriteFile(secret, []byte("a secret the two nodes share\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	nodes := startPair(t, func(i int) string { return natPairConfig(datapath, mode, i, secret) }, frontInstance, backInstance)
	res := fleetHammer(t, 4, 200, func() (string, error) { return httpOnce(netip.AddrPortFrom(fleetVIP4, 80)) })
	res.requireNoFailures(t)

	conns := startLongLived(t, longLivedConns, netip.AddrPortFrom(fleetVIP4, 80))
	time.Sleep(time.Second) // the flows reach node 2's table meanwhile (tens of ms)
	// Backend 1 leaves the Maglev tables of both nodes: its flows stay only where they are known.
	for i, d := range nodes {
		if r := d.cli("backend", "weight", "web", theFleet.BackendAddr(1, false).String(), "0"); r.Err != nil {
			t.Fatalf("node %d: backend weight: %v\n%s", i+1, r.Err, r.Stderr)
		}
	}
	time.Sleep(500 * time.Millisecond)
	// Second chance alone would keep these flows too: that the replicated state holds them is
	// shown by node 2 holding node 1's flows to backend 1 before the cut, and (ebpf, where it is
	// counted) by no second chance given after it.
	b1 := theFleet.BackendAddr(1, false).String()
	held := flowsOf(t, nodes[0], "web", b1)
	if held == 0 {
		t.Fatal("no long-lived connection on backend 1")
	}
	waitFor(t, "node 2 holding node 1's flows to backend 1", 5*time.Second, func() bool { return flowsOf(t, nodes[1], "web", b1) >= held })
	if err := theFleet.CutBalancer(1); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = theFleet.RestoreBalancer(1) }()
	failover := waitFor(t, "node 2 takes the addresses over", 15*time.Second, func() bool { return vrrpHolder(t) == 2 })
	time.Sleep(2 * time.Second)
	slowest := conns.requireKept(t)
	if n := secondChances(t, nodes[1]); n != 0 {
		t.Errorf("node 2 gave %d second chances: the replicated flows were not all there", n)
	}
	t.Logf("%s %s: node 2 took over after %v; slowest long-lived request %v", datapath, mode, failover.Round(time.Millisecond), slowest.Round(time.Millisecond))
	if r := nodes[1].cli("sync"); r.Err == nil {
		t.Logf("node 2's sluice sync:\n%s", r.Stdout)
	}

	// Fail-back: new streams run through node 2, backend 2 leaves the tables, and node 1 comes
	// back with its daemon restarted: it takes the addresses back (preempt) only once it has node
	// 2's flows, which it then keeps.
	conns = startLongLived(t, longLivedConns, netip.AddrPortFrom(fleetVIP4, 80))
	time.Sleep(time.Second)
	nodes[0].stop()
	for i, d := range nodes {
		if i == 0 {
			continue
		}
		if r := d.cli("backend", "weight", "web", theFleet.BackendAddr(2, false).String(), "0"); r.Err != nil {
			t.Fatalf("node %d: backend weight: %v\n%s", i+1, r.Err, r.Stderr)
		}
	}
	weightOnNode1(t, nodes[0], 1, 2)
	time.Sleep(500 * time.Millisecond)
	if err := theFleet.RestoreBalancer(1); err != nil {
		t.Fatal(err)
	}
	nodes[0].start()
	back := waitFor(t, "node 1 takes the addresses back", 30*time.Second, func() bool { return vrrpHolder(t) == 1 })
	time.Sleep(2 * time.Second)
	slowest = conns.requireKept(t)
	t.Logf("%s %s: node 1 restarted and took the addresses back after %v; slowest long-lived request %v", datapath, mode, back.Round(time.Millisecond), slowest.Round(time.Millisecond))
	if r := nodes[0].cli("sync"); r.Err == nil {
		t.Logf("node 1's sluice sync:\n%s", r.Stdout)
	}
	requireInitialSyncFromPeer(t, nodes[0], datapath)
}

// requireInitialSyncFromPeer fails t unless d's initial sync took a peer's table: its flow tables'
// on ebpf, its conntrack table's on nft (not a timeout without one).
func requireInitialSyncFromPeer(t *testing.T, d *daemon, datapath string) {
	t.Helper()
	var st struct {
		Flows           *syncTable `json:"flows"`
		ConntrackResync *syncTable `json:"conntrack_resync"`
	}
	d.mustJSON(&st, "sync")
	table := st.Flows
	if datapath == "nft" {
		table = st.ConntrackResync
	}
	if table == nil || !table.InitialSync.Done || table.InitialSync.Peer == "" {
		t.Errorf("%s: node 1's initial sync did not take a peer's table: %+v", datapath, table)
	}
}

// syncTable is what the e2e tests read of a replication's status (replication.FlowStatus).
type syncTable struct {
	InitialSync struct {
		Done bool   `json:"done"`
		Peer string `json:"peer"`
	} `json:"initial_sync"`
}

// flowsOf counts the flows of service that node d holds, those to backend addr ("": every one).
func flowsOf(t *testing.T, d *daemon, service, addr string) int {
	t.Helper()
	args := []string{"flows", service, "-o", "json"}
	if addr != "" {
		args = append(args, "--backend", addr)
	}
	r := d.cli(args...)
	if r.Err != nil {
		t.Fatalf("sluice flows: %v\n%s", r.Err, r.Stderr)
	}
	var list struct {
		Total int `json:"total"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &list); err != nil {
		t.Fatalf("sluice flows -o json: %v\n%s", err, r.Stdout)
	}
	return list.Total
}

// secondChances is the web service's count of second chances on node d (ebpf; 0 on nft).
func secondChances(t *testing.T, d *daemon) uint64 {
	t.Helper()
	r := d.cli("list", "-o", "json")
	if r.Err != nil {
		t.Fatalf("sluice list: %v\n%s", r.Err, r.Stderr)
	}
	var services []struct {
		Name          string `json:"name"`
		SecondChances uint64 `json:"second_chances"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &services); err != nil {
		t.Fatalf("sluice list -o json: %v\n%s", err, r.Stdout)
	}
	for _, s := range services {
		if s.Name == "web" {
			return s.SecondChances
		}
	}
	return 0
}

// routeClientViaBackGateway routes the backends' replies to the client through the pair's
// backends'-side VRRP address, under nat (fullnat's replies go to its source), until the test
// ends.
func routeClientViaBackGateway(t *testing.T, mode string) {
	t.Helper()
	client := theFleet.ClientAddr(false).String() + "/32"
	for j := 1; j <= labBackends && mode == "nat"; j++ {
		ns := theFleet.BackendNS(j)
		if r := run(t, "ip", "-n", ns, "route", "add", client, "via", vrrpBackGateway.String()); r.Err != nil {
			t.Fatalf("backend %d: route to the client via %s: %v: %s", j, vrrpBackGateway, r.Err, r.Stderr)
		}
		t.Cleanup(func() { run(t, "ip", "-n", ns, "route", "del", client) })
	}
}

// TestKeepalivedPairSecondChance: a pair that replicates nothing. The backend that holds some of
// the long-lived connections leaves the table on both nodes (weight 0), then the master dies:
// the new master has no state for any connection, but each one's slot remembers the backend it
// had before the change (second chance), so every connection goes on, those of the backend
// that left included. (Without second chance, those are reset: their slot now names another
// backend.)
func TestKeepalivedPairSecondChance(t *testing.T) {
	fleetLab(t)
	for _, dp := range []string{"nft", "ebpf"} {
		t.Run(dp, func(t *testing.T) {
			routeClientViaBackGateway(t, "nat")
			nodes := startPair(t, func(i int) string { return natPairConfig(dp, "nat", i, "") }, frontInstance, backInstance)
			conns := startLongLived(t, longLivedConns, netip.AddrPortFrom(fleetVIP4, 80))
			time.Sleep(500 * time.Millisecond)
			for i, d := range nodes {
				if r := d.cli("backend", "weight", "web", theFleet.BackendAddr(1, false).String(), "0"); r.Err != nil {
					t.Fatalf("node %d: backend weight: %v\n%s", i+1, r.Err, r.Stderr)
				}
			}
			time.Sleep(500 * time.Millisecond)
			if err := theFleet.CutBalancer(1); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = theFleet.RestoreBalancer(1) }()
			waitFor(t, "node 2 takes the addresses over", 15*time.Second, func() bool { return vrrpHolder(t) == 2 })
			time.Sleep(2 * time.Second)
			conns.requireKept(t)
			if n := secondChances(t, nodes[1]); dp == "ebpf" && n == 0 {
				t.Error("node 2 counted no second chance: the connections went on some other way")
			}
		})
	}
}

// weightOnNode1 gives backends weight 0 in the config file node 1's daemon starts with (it is
// stopped), as the changes through the API did on node 2.
func weightOnNode1(t *testing.T, d *daemon, backends ...int) {
	t.Helper()
	data, err := os.ReadFile(d.config)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	for _, j := range backends {
		line := fmt.Sprintf("      - address: %s\n", theFleet.BackendAddr(j, false))
		if !strings.Contains(text, line) {
			t.Fatalf("no line %q in %s", line, d.config)
		}
		text = strings.Replace(text, line, line+"        weight: 0\n", 1)
	}
	if err := os.WriteFile(d.config, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
