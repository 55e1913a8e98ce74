package ebpf

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/sluicelb/sluice/internal/netnstest"
)

// The program under BPF_PROG_TEST_RUN: loaded unpinned with maps of its own, and run inside a
// throwaway network namespace whose routes and neighbours let bpf_fib_lookup find next hops as it
// does on a balancer.

// testMapSizes are the map sizes of a program loaded for a test: small, so loading is quick.
var testMapSizes = map[string]uint32{sluiceMapFlows: 1 << 12, sluiceMapReplies: 1 << 12, sluiceMapMaglev: 1 << 12}

// loadUnpinned loads both programs with fresh maps that nothing else shares (no pinning), sized by
// sizes over the defaults, closed when the test ends. It skips the test without root.
func loadUnpinned(tb testing.TB, sizes map[string]uint32) *sluiceObjects {
	tb.Helper()
	return loadUnpinnedEdited(tb, sizes, func(*ebpf.MapSpec) {})
}

// loadUnpinnedEdited is loadUnpinned with edit applied to every map's spec before loading.
func loadUnpinnedEdited(tb testing.TB, sizes map[string]uint32, edit func(*ebpf.MapSpec)) *sluiceObjects {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root: loads BPF programs")
	}
	spec, err := loadSluice()
	if err != nil {
		tb.Fatal(err)
	}
	for name, ms := range spec.Maps {
		ms.Pinning = ebpf.PinNone
		if n, ok := sizes[name]; ok {
			ms.MaxEntries = n
		}
		edit(ms)
	}
	var objs sluiceObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			tb.Fatalf("loading: %+v", ve)
		}
		tb.Fatalf("loading: %v", err)
	}
	tb.Cleanup(func() { objs.Close() })
	return &objs
}

// hook is where a program runs: tc (sluice_tc) or XDP (sluice_xdp).
type hook int

const (
	hookTC hook = iota
	hookXDP
)

func (h hook) String() string { return [...]string{"tc", "xdp"}[h] }

// program is the hook's program.
func (h hook) program(objs *sluiceObjects) *ebpf.Program {
	if h == hookXDP {
		return objs.SluiceXdp
	}
	return objs.SluiceTc
}

// skbCtx is the head of struct __sk_buff up to ifindex, which a test run may set.
type skbCtx struct {
	Len, PktType, Mark, QueueMapping, Protocol, VlanPresent, VlanTCI, VlanProto, Priority uint32
	IngressIfindex, Ifindex                                                               uint32
}

// xdpCtx is struct xdp_md.
type xdpCtx struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// runContext is the context of a run of the hook's program on a frame of n bytes received on
// ifindex.
func (h hook) runContext(n int, ifindex uint32) any {
	if h == hookXDP {
		return xdpCtx{DataEnd: uint32(n), IngressIfindex: ifindex}
	}
	return skbCtx{IngressIfindex: ifindex, Ifindex: ifindex}
}

// run runs the hook's program once on frame, received on ifindex; it returns the program's
// return code and the frame as the program left it.
func (h hook) run(tb testing.TB, objs *sluiceObjects, frame []byte, ifindex uint32) (uint32, []byte) {
	tb.Helper()
	out := make([]byte, len(frame)+256)
	opts := ebpf.RunOptions{Data: frame, DataOut: out, Context: h.runContext(len(frame), ifindex)}
	ret, err := h.program(objs).Run(&opts)
	if err != nil {
		tb.Fatalf("%s: running: %v", h, err)
	}
	return ret, opts.DataOut
}

// verdict is what the program did with a packet, whichever the hook.
type verdict int

const (
	vPass     verdict = iota + 1 // TC_ACT_OK, XDP_PASS
	vDrop                        // TC_ACT_SHOT, XDP_DROP
	vRedirect                    // TC_ACT_REDIRECT, XDP_REDIRECT
)

func (v verdict) String() string { return [...]string{"?", "pass", "drop", "redirect"}[v] }

// verdictOf reads a program's return code.
func (h hook) verdictOf(ret uint32) verdict {
	codes := map[uint32]verdict{0: vPass, 2: vDrop, 7: vRedirect} // TC_ACT_*
	if h == hookXDP {
		codes = map[uint32]verdict{2: vPass, 1: vDrop, 4: vRedirect} // XDP_*
	}
	return codes[ret]
}

// The fixture network, as the balancer sees it: cli0 faces the clients (10.0.1.0/24 with a
// router at .254 to 198.51.100.0/24, fd00:1::/64 with a router at ::fe), srv0 the backends
// (10.0.2.0/24, fd00:2::/64). Every neighbour but noNeigh4 is permanent; unrouted4 has no route.
var (
	macLBClient  = mustMAC("02:00:00:00:01:01") // cli0
	macLBBackend = mustMAC("02:00:00:00:02:01") // srv0
	macClient    = mustMAC("02:00:00:00:01:0a")
	macRouter    = mustMAC("02:00:00:00:01:fe")
	macB1        = mustMAC("02:00:00:00:02:0b")
	macB2        = mustMAC("02:00:00:00:02:0c")
	macB3        = mustMAC("02:00:00:00:02:0d")
	macElsewhere = mustMAC("02:00:00:00:01:0b") // another balancer's, on the client side

	lbClient4, lbClient6   = mustAddr("10.0.1.1"), mustAddr("fd00:1::1")
	lbBackend4, lbBackend6 = mustAddr("10.0.2.1"), mustAddr("fd00:2::1") // also the fullnat source
	client4, client6       = mustAddr("10.0.1.10"), mustAddr("fd00:1::10")
	router4, router6       = mustAddr("10.0.1.254"), mustAddr("fd00:1::fe")
	remote4                = mustAddr("198.51.100.7")
	b1v4, b2v4, b3v4       = mustAddr("10.0.2.11"), mustAddr("10.0.2.12"), mustAddr("10.0.2.13")
	b1v6, b2v6             = mustAddr("fd00:2::11"), mustAddr("fd00:2::12")
	noNeigh4               = mustAddr("10.0.2.99")
	unrouted4              = mustAddr("10.9.9.9")
)

// fxNet is the fixture network: its namespace and the balancer's interface indexes.
type fxNet struct {
	ns              netns.NsHandle
	client, backend uint32 // cli0, srv0
}

// newFxNet builds the fixture network in a fresh network namespace, which goes when the test
// ends. Goroutines enter it with enter.
func newFxNet(tb testing.TB) *fxNet {
	tb.Helper()
	n := &fxNet{ns: netnstest.New(tb)}
	netnstest.In(tb, n.ns, func() { n.build(tb) })
	return n
}

// build sets the fixture network up in the current namespace.
func (n *fxNet) build(tb testing.TB) {
	tb.Helper()
	forwardingOn(tb)
	n.client = fxVeth(tb, "cli0", macLBClient, "10.0.1.1/24", "fd00:1::1/64")
	n.backend = fxVeth(tb, "srv0", macLBBackend, "10.0.2.1/24", "fd00:2::1/64")
	for _, nb := range []struct {
		ip  netip.Addr
		mac net.HardwareAddr
		dev uint32
	}{
		{client4, macClient, n.client}, {client6, macClient, n.client},
		{router4, macRouter, n.client}, {router6, macRouter, n.client},
		{b1v4, macB1, n.backend}, {b1v6, macB1, n.backend},
		{b2v4, macB2, n.backend}, {b2v6, macB2, n.backend},
		{b3v4, macB3, n.backend},
	} {
		neigh := &netlink.Neigh{LinkIndex: int(nb.dev), State: netlink.NUD_PERMANENT, IP: nb.ip.AsSlice(), HardwareAddr: nb.mac}
		if err := netlink.NeighAdd(neigh); err != nil {
			tb.Fatalf("neighbour %v: %v", nb.ip, err)
		}
	}
	_, remote, _ := net.ParseCIDR("198.51.100.0/24")
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: int(n.client), Dst: remote, Gw: router4.AsSlice()}); err != nil {
		tb.Fatalf("route to %v: %v", remote, err)
	}
}

// enter moves the calling goroutine, locked to its thread, into the fixture network until the
// test ends: BPF_PROG_TEST_RUN finds devices and routes in the caller's namespace.
func (n *fxNet) enter(tb testing.TB) {
	tb.Helper()
	netnstest.Enter(tb, n.ns)
}

// fxVeth adds a veth pair, up, whose end name has mac and the addresses; it returns its index.
func fxVeth(tb testing.TB, name string, mac net.HardwareAddr, addrs ...string) uint32 {
	tb.Helper()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name, HardwareAddr: mac}, PeerName: name + "-peer"}
	if err := netlink.LinkAdd(veth); err != nil {
		tb.Fatal(err)
	}
	trafficLinkUp(tb, name+"-peer")
	return uint32(trafficLinkUp(tb, name, addrs...))
}

// mustMAC parses a MAC address.
func mustMAC(s string) net.HardwareAddr {
	mac, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return mac
}

// mustAddr parses an IP address.
func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// TestTCWritesOnlyThroughHelpers guards the tc program's cost for traffic it does not rewrite:
// one direct packet write anywhere in it makes the verifier prepend a prologue that unclones
// every cloned skb (TCP transmits clones) before the program even looks at it. That prologue
// starts by loading the skb's cloned byte from the context.
func TestTCWritesOnlyThroughHelpers(t *testing.T) {
	objs := loadUnpinned(t, testMapSizes)
	info, err := objs.SluiceTc.Info()
	if err != nil {
		t.Fatal(err)
	}
	insns, err := info.Instructions()
	if err != nil {
		t.Skipf("reading the translated program: %v", err)
	}
	first := insns[0]
	if first.OpCode.Class() == asm.LdXClass && first.OpCode.Size() == asm.Byte && first.Src == asm.R1 {
		t.Fatalf("sluice_tc starts with %v: the verifier added the unclone prologue, so the program writes packet memory directly somewhere", first)
	}
}
