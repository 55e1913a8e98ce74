package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/lab"
)

// fleetSource is fleet node i's fullnat source address, which it announces over BGP (and the
// other node as a backup route).
func fleetSource(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 91, 5, byte(i)}) }

// fullNATFleetConfig is node i's config in a fleet of nodes 1 and 2: the fullnat service on
// fleetFullNATVIP translated to the node's own source, its flows replicated to the other node
// over the backends' side, and every node's source in bgp.fullnat_sources.
func fullNATFleetConfig(datapath string, i int, secretFile string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "datapath: %s\n%s", datapath, pairSync(i, secretFile))
	fmt.Fprintf(&b, "bgp:\n  asn: %d\n  shutdown_grace: 1s\n  fullnat_sources: [%s, %s]\n  peers:\n    - {address: %s, asn: %d, hold_time: %s}\n",
		lab.BalancerASN, fleetSource(1), fleetSource(2), theFleet.RouterFrontAddr(false), lab.RouterASN, fleetHoldTime)
	fmt.Fprintf(&b, "services:\n  - name: api\n    vip: %s\n    port: 80\n    mode: fullnat\n    fullnat_source: %s\n", fleetFullNATVIP, fleetSource(i))
	b.WriteString(checkedBackends())
	return b.String()
}

// TestFleetFullNATFailover: two fleet nodes behind the BIRD router serve a fullnat service, each
// translating to a source of its own that it announces, the other announcing it as a backup; they
// replicate their flows. Node 2 dies with long-lived connections on it: the router moves the VIP
// and node 2's source to node 1, which holds node 2's flows, and every connection goes on.
func TestFleetFullNATFailover(t *testing.T) {
	fleetLab(t)
	for _, dp := range []string{"nft", "ebpf"} {
		t.Run(dp, func(t *testing.T) { testFleetFullNATFailover(t, dp) })
	}
}

func testFleetFullNATFailover(t *testing.T, datapath string) {
	if hops := nextHops(t, fleetFullNATVIP); len(hops) != 0 {
		t.Fatalf("the router routes %s before any node runs: %v", fleetFullNATVIP, hops)
	}
	secret := filepath.Join(t.TempDir(), "sync.key")
	if err := os.WriteFile(secret, []byte("a secret the fleet's nodes share\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	nodes := make([]*daemon, 2)
	for i := range nodes {
		nodes[i] = startDaemonIn(t, theFleet.BalancerNSOf(i+1), writeConfig(t, fmt.Sprintf("fullnat%d.yaml", i+1), fullNATFleetConfig(datapath, i+1, secret)))
	}
	t.Cleanup(func() {
		for i, d := range nodes {
			d.stop()
			run(t, sluiceBin, "--netns", theFleet.BalancerNSOf(i+1), "flush")
			run(t, "ip", "netns", "exec", theFleet.BalancerNSOf(i+1), "conntrack", "-F")
		}
	})
	both := frontAddrs(false, 1, 2)
	waitNextHops(t, fleetFullNATVIP, 30*time.Second, both...)
	// Each source goes to its owner: the backup route is less preferred.
	for i := 1; i <= 2; i++ {
		waitNextHops(t, fleetSource(i), 30*time.Second, frontAddrs(false, i)...)
	}
	before := servicePackets(t, nodes[1], "api")
	conns := startLongLived(t, longLivedConns, netip.AddrPortFrom(fleetFullNATVIP, 80))
	time.Sleep(time.Second) // the flows reach the other node meanwhile
	if servicePackets(t, nodes[1], "api") == before {
		t.Fatal("no long-lived connection through node 2: ECMP put them all on node 1")
	}
	if err := theFleet.CutBalancer(2); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = theFleet.RestoreBalancer(2) }()
	moved := waitNextHops(t, fleetSource(2), 30*time.Second, frontAddrs(false, 1)...)
	waitNextHops(t, fleetFullNATVIP, 30*time.Second, frontAddrs(false, 1)...)
	time.Sleep(2 * time.Second)
	slowest := conns.requireKept(t)
	t.Logf("%s fullnat fleet: node 2 cut, its source routed to node 1 after %v; slowest long-lived request %v",
		datapath, moved.Round(time.Millisecond), slowest.Round(time.Millisecond))
}
