package conntrackd

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/testutil"
)

// Flows of TestInitialSyncUnderLiveTraffic: the peer's table, and its live flows.
var (
	tableClient = net.ParseIP("10.9.0.1").To4()
	liveClient  = net.ParseIP("10.8.0.1").To4()
)

// tcpFlow is an established TCP flow from client:port to 10.2.2.2:80.
func tcpFlow(client net.IP, port uint16) *netlink.ConntrackFlow {
	server := net.ParseIP("10.2.2.2").To4()
	return &netlink.ConntrackFlow{
		FamilyType: unix.AF_INET,
		Forward:    netlink.IPTuple{Protocol: unix.IPPROTO_TCP, SrcIP: client, DstIP: server, SrcPort: port, DstPort: 80},
		Reverse:    netlink.IPTuple{Protocol: unix.IPPROTO_TCP, SrcIP: server, DstIP: client, SrcPort: 80, DstPort: port},
		TimeOut:    600,
		ProtoInfo:  &netlink.ProtoInfoTCP{State: nl.TCP_CONNTRACK_ESTABLISHED},
	}
}

// countFlows counts the flows from client in ns's kernel table.
func countFlows(t *testing.T, ns netns.NsHandle, client net.IP) int {
	t.Helper()
	n := 0
	for _, f := range ipv4Flows(t, ns) {
		if f.Forward.SrcIP.Equal(client) {
			n++
		}
	}
	return n
}

// TestInitialSyncUnderLiveTraffic: a node that comes back while its peer replicates new flows
// all along ends its initial sync (waiting for the injected entries to stop growing, it never
// did), and not before the peer's table is in.
func TestInitialSyncUnderLiveTraffic(t *testing.T) {
	a, b := syncPair(t)
	ctx := context.Background()
	must(t, b.sup.Set(ctx, b.opts))
	h, err := netlink.NewHandleAt(b.ns)
	must(t, err)
	t.Cleanup(h.Close)
	const tableSize = 2000
	for i := range tableSize {
		must(t, h.ConntrackCreate(netlink.ConntrackTable, unix.AF_INET, tcpFlow(tableClient, uint16(1024+i))))
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(stop); <-stopped })
	go func() { // the peer's live flows: 50 a second until the test ends
		defer close(stopped)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for port := uint16(1024); ; port++ {
			select {
			case <-stop:
				return
			case <-tick.C:
				if err := h.ConntrackCreate(netlink.ConntrackTable, unix.AF_INET, tcpFlow(liveClient, port)); err != nil {
					t.Errorf("a live flow: %v", err)
					return
				}
			}
		}
	}()
	must(t, a.sup.Set(ctx, a.opts))
	waitClosed(t, "A's initial sync while B replicates live flows", a.sup.InitialSync())
	if n := countFlows(t, a.ns, tableClient); n != tableSize {
		t.Errorf("initial sync done with %d of B's %d flows in A's table", n, tableSize)
	}
	if n := countFlows(t, a.ns, liveClient); n == 0 {
		t.Error("no live flow replicated meanwhile: the test tested nothing")
	}
}

// tcpStateOf is the TCP state and timeout of the flow from client:port in ns's table (ok false:
// none).
func tcpStateOf(t *testing.T, ns netns.NsHandle, client net.IP, port uint16) (state uint8, timeout uint32, ok bool) {
	t.Helper()
	for _, f := range ipv4Flows(t, ns) {
		if f.Forward.SrcIP.Equal(client) && f.Forward.SrcPort == port {
			return f.ProtoInfo.(*netlink.ProtoInfoTCP).State, f.TimeOut, true
		}
	}
	return 0, 0, false
}

// TestInitialSyncKeepsClosingConnections: a node whose daemon restarts asks its peer for its
// table, where the replica of a connection closing here is still established (the event mask
// holds the close back); the node's own entry stays closing, and the peer's replica follows it.
func TestInitialSyncKeepsClosingConnections(t *testing.T) {
	a, b := syncPair(t)
	ctx := context.Background()
	must(t, a.sup.Set(ctx, a.opts))
	must(t, b.sup.Set(ctx, b.opts))
	waitClosed(t, "A's initial sync", a.sup.InitialSync())
	h, err := netlink.NewHandleAt(a.ns)
	must(t, err)
	t.Cleanup(h.Close)
	const port = 4000
	must(t, h.ConntrackCreate(netlink.ConntrackTable, unix.AF_INET, tcpFlow(tableClient, port)))
	testutil.Eventually(t, "the connection replicated to B", func() bool {
		state, _, ok := tcpStateOf(t, b.ns, tableClient, port)
		return ok && state == nl.TCP_CONNTRACK_ESTABLISHED
	})

	// A's daemon stops; the connection closes meanwhile, and B's replica stays established.
	must(t, a.sup.Set(ctx, nil))
	closing := tcpFlow(tableClient, port)
	closing.TimeOut = 120
	closing.ProtoInfo = &netlink.ProtoInfoTCP{State: nl.TCP_CONNTRACK_TIME_WAIT}
	must(t, h.ConntrackUpdate(netlink.ConntrackTable, unix.AF_INET, closing))

	// A's daemon starts again and takes B's table.
	restarted := supervisorIn(t, a.ns)
	must(t, restarted.Set(ctx, a.opts))
	waitClosed(t, "A's initial sync after its restart", restarted.InitialSync())
	state, timeout, ok := tcpStateOf(t, a.ns, tableClient, port)
	if !ok || state != nl.TCP_CONNTRACK_TIME_WAIT || timeout > 120 {
		t.Errorf("A's own closing connection after the initial sync: present %v, state %d, timeout %d s; want TIME_WAIT (%d), at most 120 s",
			ok, state, timeout, nl.TCP_CONNTRACK_TIME_WAIT)
	}
	testutil.Eventually(t, "B's replica closing too", func() bool {
		state, timeout, ok := tcpStateOf(t, b.ns, tableClient, port)
		return ok && state == nl.TCP_CONNTRACK_TIME_WAIT && timeout <= 120
	})
}
