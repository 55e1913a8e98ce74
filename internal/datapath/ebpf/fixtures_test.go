package ebpf

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/config"
)

// Packet fixtures, Katran style: a table of {description, input frame, expected verdict,
// expected output frame} run through BPF_PROG_TEST_RUN on both hooks, each on fresh maps holding
// the fixture world below, inside the fixture network (prog_test.go).

// The fixture world's VIPs.
var (
	vipNat4, vipFull4, vipDSR4 = mustAddr("10.0.9.1"), mustAddr("10.0.9.2"), mustAddr("10.0.9.3")
	vipEmpty4, vipNoNeigh4     = mustAddr("10.0.9.4"), mustAddr("10.0.9.5")
	vipUnrouted4               = mustAddr("10.0.9.6")
	vipNat6, vipFull6, vipDSR6 = mustAddr("fd00:9::1"), mustAddr("fd00:9::2"), mustAddr("fd00:9::3")
)

// fxBackends are the fixture world's backends by id (port 0: the client's).
var fxBackends = map[uint32]netip.AddrPort{
	1: ap(b1v4, 0), 2: ap(b2v4, 8080), 3: ap(b1v6, 0), 4: ap(b2v6, 8080),
	5: ap(noNeigh4, 0), 6: ap(unrouted4, 0), 7: ap(b3v4, 0),
}

// fxService is a service of the fixture world.
type fxService struct {
	id       uint32
	vip      netip.Addr
	port     uint16
	proto    uint8
	mode     config.Mode
	fallback config.Fallback
	ring     []uint32 // backend ids filling its Maglev table; none: no backend
}

const (
	protoTCP = unix.IPPROTO_TCP
	protoUDP = unix.IPPROTO_UDP
)

// fxServices are the fixture world's services.
var fxServices = []fxService{
	{1, vipNat4, 80, protoTCP, "nat", "drop", []uint32{1}},
	{2, vipNat4, 53, protoUDP, "nat", "drop", []uint32{2}},
	{3, vipFull4, 80, protoTCP, "fullnat", "drop", []uint32{2}},
	{4, vipFull4, 53, protoUDP, "fullnat", "drop", []uint32{1}},
	{5, vipDSR4, 80, protoTCP, "dsr", "drop", []uint32{1}},
	{6, vipDSR4, 53, protoUDP, "dsr", "drop", []uint32{7}},
	{7, vipNat6, 80, protoTCP, "nat", "drop", []uint32{3}},
	{8, vipNat6, 53, protoUDP, "nat", "drop", []uint32{4}},
	{9, vipFull6, 80, protoTCP, "fullnat", "drop", []uint32{4}},
	{10, vipFull6, 53, protoUDP, "fullnat", "drop", []uint32{3}},
	{11, vipDSR6, 80, protoTCP, "dsr", "drop", []uint32{3}},
	{12, vipDSR6, 53, protoUDP, "dsr", "drop", []uint32{3}},
	{13, vipEmpty4, 80, protoTCP, "nat", "drop", nil},
	{14, vipEmpty4, 81, protoTCP, "nat", "reject", nil},
	{15, vipNoNeigh4, 80, protoTCP, "nat", "drop", []uint32{5}},
	{16, vipNoNeigh4, 81, protoTCP, "dsr", "drop", []uint32{5}},
	{17, vipUnrouted4, 80, protoTCP, "nat", "drop", []uint32{6}},
}

// fxRingSize is the size of every fixture service's Maglev table; service id's table starts at
// slot id*fxRingSize.
const fxRingSize = 7

// fxNatPort is the fixture world's one fullnat source port.
const fxNatPort = 40000

// fxEnv is a fixture's program, maps and network, on one hook.
type fxEnv struct {
	t    *testing.T
	hook hook
	objs *sluiceObjects
	net  *fxNet
}

// newFxEnv loads the programs, to run the hook's; reset writes the fixture world into the maps.
func newFxEnv(t *testing.T, h hook, n *fxNet) *fxEnv {
	return &fxEnv{t: t, hook: h, objs: loadUnpinned(t, testMapSizes), net: n}
}

// reset empties the maps and writes the fixture world into them, for the test t: the interfaces'
// MACs are recorded, as Apply records them for XDP.
func (e *fxEnv) reset(t *testing.T) {
	e.t = t
	for _, m := range []*ebpf.Map{e.objs.Flows, e.objs.Replies} {
		var k sluiceFlowKey
		var v []byte
		var keys []sluiceFlowKey
		for it := m.Iterate(); it.Next(&k, &v); {
			keys = append(keys, k)
		}
		for _, k := range keys {
			if err := m.Delete(k); err != nil {
				t.Fatal(err)
			}
		}
	}
	zero := make([]sluiceStats, ebpf.MustPossibleCPU())
	for id := range uint32(100) {
		e.put(e.objs.ServiceStats, id, zero)
		e.put(e.objs.BackendStats, id, zero)
		e.put(e.objs.ServiceUnforwarded, id, make([]sluiceUnforwarded, ebpf.MustPossibleCPU()))
	}
	for id, b := range fxBackends {
		a, family := wireAddr(b.Addr())
		e.put(e.objs.Backends, id, sluiceBackend{Addr: a, Port: wirePort(b.Port()), Family: family, Flags: sluiceBackendFlagsBACKEND_VALID})
	}
	for _, s := range fxServices {
		e.setRing(s.id, s.ring...)
		e.put(e.objs.Vips, vipKeyOf(s.vip, s.port, s.proto), sluiceService{
			Id: s.id, RingOffset: s.id * fxRingSize, RingSize: uint32(min(len(s.ring), 1)) * fxRingSize,
			Mode: wireModes[s.mode], Fallback: wireFallbacks[s.fallback],
		})
	}
	e.resetOwnSources()
	for ifindex, mac := range map[uint32][]byte{e.net.client: macLBClient, e.net.backend: macLBBackend} {
		var v sluiceIfMac
		copy(v.Addr[:], mac)
		e.put(e.objs.IfMacs, ifindex, v)
	}
	var g sluiceGlobals
	copy(g.Snat4[:], lbBackend4.AsSlice())
	g.Snat6 = lbBackend6.As16()
	g.PortLow, g.PortHigh = fxNatPort, fxNatPort
	e.put(e.objs.Config, uint32(0), g)
}

// put writes a map entry.
func (e *fxEnv) put(m interface{ Put(k, v any) error }, k, v any) {
	e.t.Helper()
	if err := m.Put(k, v); err != nil {
		e.t.Fatal(err)
	}
}

// setRing fills a service's Maglev table with backend ids, in turn.
func (e *fxEnv) setRing(service uint32, ids ...uint32) {
	for i := range uint32(fxRingSize) {
		if len(ids) > 0 {
			e.put(e.objs.Maglev, service*fxRingSize+i, ids[int(i)%len(ids)])
		}
	}
}

// run runs the program on frame received on the client side (or the backend side).
func (e *fxEnv) run(frame []byte, fromBackend bool) (verdict, []byte) {
	e.t.Helper()
	ifindex := e.net.client
	if fromBackend {
		ifindex = e.net.backend
	}
	ret, out := e.hook.run(e.t, e.objs, frame, ifindex)
	return e.hook.verdictOf(ret), out
}

// send runs a packet that must be forwarded (a flow's first packet, to set state up).
func (e *fxEnv) send(frame []byte, fromBackend bool) {
	e.t.Helper()
	if v, _ := e.run(frame, fromBackend); v != vRedirect {
		e.t.Fatalf("setting up: the packet was not forwarded (%v)", v)
	}
}

// flow reads the flows entry of a client's flow.
func (e *fxEnv) flow(client, vip netip.AddrPort, proto uint8) (sluiceFlow, bool) {
	var f sluiceFlow
	err := e.objs.Flows.Lookup(flowKeyOf(client, vip, proto), &f)
	return f, err == nil
}

// reply reads a replies entry.
func (e *fxEnv) reply(src, dst netip.AddrPort, proto uint8) (sluiceReverse, bool) {
	var r sluiceReverse
	err := e.objs.Replies.Lookup(flowKeyOf(src, dst, proto), &r)
	return r, err == nil
}

// stats sums a per-CPU counter over the CPUs.
func (e *fxEnv) stats(m interface{ Lookup(k, v any) error }, id uint32) sluiceStats {
	e.t.Helper()
	var per []sluiceStats
	if err := m.Lookup(id, &per); err != nil {
		e.t.Fatal(err)
	}
	var s sluiceStats
	for _, c := range per {
		s.Packets += c.Packets
		s.Bytes += c.Bytes
		s.Flows += c.Flows
	}
	return s
}

// unforwarded sums a service's per-CPU counters of packets not forwarded over the CPUs.
func (e *fxEnv) unforwarded(id uint32) sluiceUnforwarded {
	e.t.Helper()
	var per []sluiceUnforwarded
	if err := e.objs.ServiceUnforwarded.Lookup(id, &per); err != nil {
		e.t.Fatal(err)
	}
	var u sluiceUnforwarded
	for _, c := range per {
		u.FwdDisabled += c.FwdDisabled
		u.NoRoute += c.NoRoute
		u.NoNeigh += c.NoNeigh
	}
	return u
}

// wantCounts checks, after one packet that opened a flow, what service id and backend counted: a
// packet handed on in both stats (sent), otherwise in none and in the service's unforwarded
// counters as u says.
func (e *fxEnv) wantCounts(service, backend uint32, sent bool, u sluiceUnforwarded) {
	e.t.Helper()
	packets := uint64(0)
	if sent {
		packets = 1
	}
	for _, s := range []sluiceStats{e.stats(e.objs.ServiceStats, service), e.stats(e.objs.BackendStats, backend)} {
		if s.Packets != packets || s.Flows != 1 {
			e.t.Errorf("counters %+v, want %d packets and 1 flow", s, packets)
		}
	}
	if got := e.unforwarded(service); got != u {
		e.t.Errorf("service %d not forwarded %+v, want %+v", service, got, u)
	}
}

// forwardingOff turns the forwarding of the fixture network's interface dev off for the test.
func forwardingOff(dev string) func(e *fxEnv) {
	return func(e *fxEnv) {
		set := func(v string) {
			for _, family := range []string{"ipv4", "ipv6"} {
				if err := os.WriteFile("/proc/sys/net/"+family+"/conf/"+dev+"/forwarding", []byte(v), 0o644); err != nil {
					e.t.Fatal(err)
				}
			}
		}
		set("0")
		e.t.Cleanup(func() { set("1") })
	}
}

// fixture is one packet test: the frame the program gets, what it must do and leave.
type fixture struct {
	name        string
	prepare     func(e *fxEnv) // state before the packet
	in          []byte
	fromBackend bool    // received on srv0, not cli0
	want        verdict // on both hooks, unless wantXDP says otherwise
	wantXDP     verdict
	out         []byte // the frame left, when forwarded or passed rewritten; nil: in, untouched
	outXDP      []byte
	// tcUntouched: tc forwards the frame without writing it (dsr: bpf_redirect_neigh alone, TTL
	// kept); out is then XDP's.
	tcUntouched bool
	check       func(e *fxEnv) // state after the packet
	onlyXDP     bool           // BPF_PROG_TEST_RUN refuses tc frames too short for their IP header
}

// expect is what f expects on a hook.
func (f *fixture) expect(h hook) (verdict, []byte) {
	v, out := f.want, f.out
	if h == hookXDP && f.wantXDP != 0 {
		v = f.wantXDP
	}
	if h == hookXDP && f.outXDP != nil {
		out = f.outXDP
	}
	if out == nil || (h == hookTC && f.tcUntouched) {
		out = f.in
	}
	if h == hookTC && v == vRedirect {
		// tc never writes MACs: bpf_redirect_neigh has the neighbour layer write the L2 header
		// on the way out, which BPF_PROG_TEST_RUN does not run
		out = bytes.Clone(out)
		copy(out[:12], f.in[:12])
	}
	return v, out
}

func TestFixtures(t *testing.T) {
	n := newFxNet(t)
	for _, h := range []hook{hookTC, hookXDP} {
		e := newFxEnv(t, h, n)
		for _, f := range fixtures() {
			if f.onlyXDP && h != hookXDP {
				continue
			}
			t.Run(h.String()+"/"+f.name, func(t *testing.T) {
				n.enter(t)
				e.reset(t)
				if f.prepare != nil {
					f.prepare(e)
				}
				got, out := e.run(f.in, f.fromBackend)
				want, wantOut := f.expect(h)
				if got != want {
					t.Fatalf("verdict %v, want %v", got, want)
				}
				if want != vDrop && !bytes.Equal(out, wantOut) {
					t.Errorf("frame left:\n%s\nwant:\n%s\ndiff at byte %d", dump(out), dump(wantOut), firstDiff(out, wantOut))
				}
				if f.check != nil {
					f.check(e)
				}
			})
		}
	}
}

// dump decodes a frame for a failure message.
func dump(frame []byte) string {
	return gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default).Dump() + hex.Dump(frame)
}

// firstDiff is the first offset where a and b differ.
func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// Clients of the fixtures.
var (
	cli4  = ap(client4, 40001)
	cli6  = ap(client6, 40001)
	snat4 = ap(lbBackend4, fxNatPort)
	snat6 = ap(lbBackend6, fxNatPort)
)

func fixtures() []fixture {
	var fs []fixture
	for _, group := range [][]fixture{passFixtures(), forwardFixtures(), stateFixtures(), routeFixtures(), replyFixtures(), icmpFixtures(), ownSourceFixtures(), malformedFixtures()} {
		fs = append(fs, group...)
	}
	return fs
}

// passFixtures: what is not the balancer's passes untouched.
func passFixtures() []fixture {
	echo := icmpErr{srcMAC: macClient, dstMAC: macLBClient, src: client4, dst: vipNat4, typ: 8, inner: udpPkt(cli4, ap(vipNat4, 53))}
	arp := serialize(&layers.Ethernet{SrcMAC: macClient, DstMAC: mustMAC("ff:ff:ff:ff:ff:ff"), EthernetType: layers.EthernetTypeARP},
		&layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4, Operation: layers.ARPRequest,
			SourceHwAddress: macClient, SourceProtAddress: client4.AsSlice(), DstHwAddress: make([]byte, 6), DstProtAddress: vipNat4.AsSlice()})
	sctp := tcpPkt(cli4, ap(vipNat4, 80))
	sctp.proto = unix.IPPROTO_SCTP
	// what a switch floods once the node holding that MAC is gone
	elsewhere := tcpPkt(cli4, ap(vipNat4, 80)).synPkt()
	elsewhere.dstMAC = macElsewhere
	noFlow := func(e *fxEnv) {
		if f, ok := e.flow(cli4, ap(vipNat4, 80), protoTCP); ok {
			e.t.Errorf("a flow was recorded: %+v", f)
		}
	}
	return []fixture{
		{name: "a SYN to a VIP in a frame for another host's MAC passes", in: elsewhere.frame(), want: vPass, check: noFlow},
		{
			name: "XDP on an interface whose MAC is not recorded balances a frame for another MAC", in: elsewhere.frame(),
			prepare: func(e *fxEnv) {
				if err := e.objs.IfMacs.Delete(e.net.client); err != nil {
					e.t.Fatal(err)
				}
			},
			want: vPass, wantXDP: vRedirect, outXDP: elsewhere.to(ap(b1v4, 80)).routed(macLBBackend, macB1).frame(),
		},
		{name: "TCP to a non-VIP address passes", in: tcpPkt(cli4, ap(lbClient4, 22)).frame(), want: vPass},
		{name: "UDP over IPv6 to a non-VIP address passes", in: udpPkt(cli6, ap(lbClient6, 53)).frame(), want: vPass},
		{name: "a VIP's other port passes", in: tcpPkt(cli4, ap(vipNat4, 443)).frame(), want: vPass},
		{name: "a VIP port's other protocol passes", in: udpPkt(cli4, ap(vipNat4, 80)).frame(), want: vPass},
		{name: "an unknown L4 protocol to a VIP passes", in: sctp.frame(), want: vPass},
		{name: "ICMP echo to a VIP passes", in: echo.frame(), want: vPass},
		{name: "ARP passes", in: arp, want: vPass},
		{name: "a VLAN-tagged frame to a VIP passes", in: vlanTagged(tcpPkt(cli4, ap(vipNat4, 80)).frame()), want: vPass},
		{name: "backend traffic that is no tracked reply passes", in: tcpPkt(ap(b1v4, 80), ap(client4, 40999)).fromBackend(macB1).frame(), fromBackend: true, want: vPass},
	}
}

// forwardFixtures: a flow's first packet in every mode, family and protocol.
func forwardFixtures() []fixture {
	nat4 := tcpPkt(cli4, ap(vipNat4, 80)).synPkt()
	natUDP4 := udpPkt(cli4, ap(vipNat4, 53))
	noCsum := natUDP4
	noCsum.zeroUDPCsum = true
	withOptions := tcpPkt(cli4, ap(vipNat4, 80))
	withOptions.ipOptions = []layers.IPv4Option{{OptionType: 148, OptionLength: 4, OptionData: []byte{0, 0}}} // router alert
	short := udpPkt(cli4, ap(vipNat4, 53))
	short.payload = nil
	pad := make([]byte, 60-len(short.frame()))
	nat6 := tcpPkt(cli6, ap(vipNat6, 80)).synPkt()
	full4 := tcpPkt(cli4, ap(vipFull4, 80)).synPkt()
	full6 := udpPkt(cli6, ap(vipFull6, 53))
	fromRemote := tcpPkt(ap(remote4, 40001), ap(vipNat4, 80)).synPkt()
	fromRemote.srcMAC = macRouter
	broadcast := nat4
	broadcast.dstMAC = mustMAC("ff:ff:ff:ff:ff:ff")
	return []fixture{
		{
			name: "nat: a TCP SYN goes to the backend, destination rewritten", in: nat4.frame(), want: vRedirect,
			out: nat4.to(ap(b1v4, 80)).routed(macLBBackend, macB1).frame(),
			check: func(e *fxEnv) {
				if f, ok := e.flow(cli4, ap(vipNat4, 80), protoTCP); !ok || f.BackendId != 1 || f.ServiceId != 1 {
					e.t.Errorf("flow %+v (found %v), want backend 1 of service 1", f, ok)
				}
				r, ok := e.reply(ap(b1v4, 80), cli4, protoTCP)
				if !ok || r.Vip != wireAddrOf(vipNat4) || r.Client != wireAddrOf(client4) || r.Vport != wirePort(80) || r.Cport != wirePort(40001) || r.BackendId != 1 {
					e.t.Errorf("reply entry %+v (found %v)", r, ok)
				}
				ipLen := uint64(len(nat4.ip()))
				for _, s := range []sluiceStats{e.stats(e.objs.ServiceStats, 1), e.stats(e.objs.BackendStats, 1)} {
					if s != (sluiceStats{Packets: 1, Bytes: ipLen, Flows: 1}) {
						e.t.Errorf("counters %+v, want 1 packet of %d bytes, 1 flow", s, ipLen)
					}
				}
			},
		},
		{name: "nat: a broadcast frame is no other host's (the stack takes it too)", in: broadcast.frame(), want: vRedirect, out: nat4.to(ap(b1v4, 80)).routed(macLBBackend, macB1).frame()},
		{name: "nat: UDP to a backend port other than the VIP's", in: natUDP4.frame(), want: vRedirect, out: natUDP4.to(ap(b2v4, 8080)).routed(macLBBackend, macB2).frame()},
		{name: "nat: a UDP checksum of 0 stays 0", in: noCsum.frame(), want: vRedirect, out: noCsum.to(ap(b2v4, 8080)).routed(macLBBackend, macB2).frame()},
		{name: "nat: IPv4 options are kept", in: withOptions.frame(), want: vRedirect, out: withOptions.to(ap(b1v4, 80)).routed(macLBBackend, macB1).frame()},
		{name: "nat: Ethernet padding is ignored and kept", in: append(short.frame(), pad...), want: vRedirect, out: append(short.to(ap(b2v4, 8080)).routed(macLBBackend, macB2).frame(), pad...)},
		{name: "nat: a client behind a router", in: fromRemote.frame(), want: vRedirect, out: fromRemote.to(ap(b1v4, 80)).routed(macLBBackend, macB1).frame()},
		{name: "nat: IPv6 TCP", in: nat6.frame(), want: vRedirect, out: nat6.to(ap(b1v6, 80)).routed(macLBBackend, macB1).frame()},
		{name: "nat: IPv6 UDP to another port", in: udpPkt(cli6, ap(vipNat6, 53)).frame(), want: vRedirect, out: udpPkt(cli6, ap(vipNat6, 53)).to(ap(b2v6, 8080)).routed(macLBBackend, macB2).frame()},
		{
			name: "fullnat: source and destination rewritten", in: full4.frame(), want: vRedirect,
			out: full4.from(snat4).to(ap(b2v4, 8080)).routed(macLBBackend, macB2).frame(),
			check: func(e *fxEnv) {
				if f, ok := e.flow(cli4, ap(vipFull4, 80), protoTCP); !ok || f.BackendId != 2 || f.NatPort != wirePort(fxNatPort) {
					e.t.Errorf("flow %+v (found %v), want backend 2 from port %d", f, ok, fxNatPort)
				}
				if r, ok := e.reply(ap(b2v4, 8080), snat4, protoTCP); !ok || r.Client != wireAddrOf(client4) || r.Cport != wirePort(40001) {
					e.t.Errorf("reply entry %+v (found %v)", r, ok)
				}
			},
		},
		{name: "fullnat: UDP", in: udpPkt(cli4, ap(vipFull4, 53)).frame(), want: vRedirect, out: udpPkt(cli4, ap(vipFull4, 53)).from(snat4).to(ap(b1v4, 53)).routed(macLBBackend, macB1).frame()},
		{name: "fullnat: IPv6 UDP", in: full6.frame(), want: vRedirect, out: full6.from(snat6).to(ap(b1v6, 53)).routed(macLBBackend, macB1).frame()},
		{name: "fullnat: IPv6 TCP", in: tcpPkt(cli6, ap(vipFull6, 80)).frame(), want: vRedirect, out: tcpPkt(cli6, ap(vipFull6, 80)).from(snat6).to(ap(b2v6, 8080)).routed(macLBBackend, macB2).frame()},
		{name: "dsr: XDP changes only the MACs and the TTL, tc nothing (bpf_redirect_neigh)", in: tcpPkt(cli4, ap(vipDSR4, 80)).frame(), want: vRedirect, out: tcpPkt(cli4, ap(vipDSR4, 80)).routed(macLBBackend, macB1).frame(), tcUntouched: true},
		{name: "dsr: UDP", in: udpPkt(cli4, ap(vipDSR4, 53)).frame(), want: vRedirect, out: udpPkt(cli4, ap(vipDSR4, 53)).routed(macLBBackend, macB3).frame(), tcUntouched: true},
		{name: "dsr: IPv6 TCP", in: tcpPkt(cli6, ap(vipDSR6, 80)).frame(), want: vRedirect, out: tcpPkt(cli6, ap(vipDSR6, 80)).routed(macLBBackend, macB1).frame(), tcUntouched: true},
		{name: "dsr: IPv6 UDP", in: udpPkt(cli6, ap(vipDSR6, 53)).frame(), want: vRedirect, out: udpPkt(cli6, ap(vipDSR6, 53)).routed(macLBBackend, macB1).frame(), tcUntouched: true},
	}
}

// stateFixtures: the flow table, fallbacks and fullnat ports.
func stateFixtures() []fixture {
	ack := tcpPkt(cli4, ap(vipNat4, 80))
	// the flow starts on backend 1, then the service's Maglev table moves to backend 7
	moved := func(e *fxEnv) {
		e.send(ack.synPkt().frame(), false)
		e.setRing(1, 7)
	}
	wantFlow := func(backend uint32, flows, packets uint64) func(e *fxEnv) {
		return func(e *fxEnv) {
			if f, _ := e.flow(cli4, ap(vipNat4, 80), protoTCP); f.BackendId != backend {
				e.t.Errorf("flow to backend %d, want %d", f.BackendId, backend)
			}
			if s := e.stats(e.objs.ServiceStats, 1); s.Flows != flows || s.Packets != packets {
				e.t.Errorf("counters %+v, want %d packets and %d new flows", s, packets, flows)
			}
		}
	}
	full := tcpPkt(cli4, ap(vipFull4, 80))
	// another client's flow holds the one fullnat port towards backend 2
	other := ap(mustAddr("10.0.1.11"), 40001)
	holder := sluiceReverse{Vip: wireAddrOf(vipFull4), Client: wireAddrOf(other.Addr()), Vport: wirePort(80), Cport: wirePort(other.Port()), ServiceId: 3, BackendId: 2}
	// The program judges a fullnat port's flow idle by its own clock (bpf_ktime_get_coarse_ns), after
	// FULLNAT_IDLE_NS (120 s): active is now, idle is 0, which only a machine up for more than
	// fullNATIdle can tell apart.
	portHeld := func(idle bool) func(e *fxEnv) {
		return func(e *fxEnv) {
			lastSeen := monotonicNow()
			if idle {
				if lastSeen < uint64(fullNATIdle+time.Second) {
					e.t.Skipf("the BPF clock reads %v: no flow can have been idle for %v yet", time.Duration(lastSeen), fullNATIdle)
				}
				lastSeen = 0
			}
			e.put(e.objs.Replies, flowKeyOf(ap(b2v4, 8080), snat4, protoTCP), holder)
			e.put(e.objs.Flows, flowKeyOf(other, ap(vipFull4, 80), protoTCP), sluiceFlow{BackendId: 2, ServiceId: 3, NatPort: wirePort(fxNatPort), LastSeen: lastSeen})
		}
	}
	wantPortOwner := func(client netip.AddrPort) func(e *fxEnv) {
		return func(e *fxEnv) {
			if r, _ := e.reply(ap(b2v4, 8080), snat4, protoTCP); r.Client != wireAddrOf(client.Addr()) || r.Cport != wirePort(client.Port()) {
				e.t.Errorf("the port's reply entry is %+v, want client %v's", r, client)
			}
		}
	}
	// service 1 left the config with a flow of cli4's still established (retired)
	retire := func(e *fxEnv) {
		e.put(e.objs.Vips, vipKeyOf(vipNat4, 80, protoTCP), sluiceService{Id: 1, Mode: wireModes["nat"], Flags: sluiceServiceFlagsSERVICE_RETIRED})
	}
	retireWithFlow := func(e *fxEnv) {
		e.send(ack.synPkt().frame(), false)
		retire(e)
	}
	noFlow := func(e *fxEnv) {
		if _, ok := e.flow(cli4, ap(vipNat4, 80), protoTCP); ok {
			e.t.Error("a flow was recorded")
		}
	}
	return []fixture{
		{
			name: "a retired service forwards its established flows", prepare: retireWithFlow, in: ack.frame(), want: vRedirect,
			out: ack.to(ap(b1v4, 80)).routed(macLBBackend, macB1).frame(), check: wantFlow(1, 1, 2),
		},
		{name: "a retired service passes a new flow to the stack", prepare: retire, in: ack.synPkt().frame(), want: vPass, check: noFlow},
		{
			name: "a retired service passes a SYN reusing an established flow's port", prepare: retireWithFlow,
			in: ack.synPkt().frame(), want: vPass, check: wantFlow(1, 1, 1),
		},
		{
			name: "an established flow keeps its backend when the Maglev table changes", prepare: moved, in: ack.frame(), want: vRedirect,
			out: ack.to(ap(b1v4, 80)).routed(macLBBackend, macB1).frame(), check: wantFlow(1, 1, 2),
		},
		{
			name: "a SYN rebalances a reused source port", prepare: moved, in: ack.synPkt().frame(), want: vRedirect,
			out: ack.synPkt().to(ap(b3v4, 80)).routed(macLBBackend, macB3).frame(),
			check: func(e *fxEnv) {
				wantFlow(7, 2, 2)(e)
				if _, ok := e.reply(ap(b1v4, 80), cli4, protoTCP); ok {
					e.t.Error("the old backend's reply entry is left")
				}
				if _, ok := e.reply(ap(b3v4, 80), cli4, protoTCP); !ok {
					e.t.Error("no reply entry for the new backend")
				}
			},
		},
		{
			name: "a flow whose backend is gone is rebalanced",
			prepare: func(e *fxEnv) {
				e.put(e.objs.Flows, flowKeyOf(cli4, ap(vipNat4, 80), protoTCP), sluiceFlow{BackendId: 99, ServiceId: 1})
			},
			in: ack.frame(), want: vRedirect, out: ack.to(ap(b1v4, 80)).routed(macLBBackend, macB1).frame(), check: wantFlow(1, 1, 1),
		},
		{
			name: "fullnat: an established flow keeps its source port",
			prepare: func(e *fxEnv) {
				e.put(e.objs.Flows, flowKeyOf(cli4, ap(vipFull4, 80), protoTCP), sluiceFlow{BackendId: 2, ServiceId: 3, NatPort: wirePort(40123)})
			},
			in: full.frame(), want: vRedirect, out: full.from(ap(lbBackend4, 40123)).to(ap(b2v4, 8080)).routed(macLBBackend, macB2).frame(),
		},
		{
			name: "fullnat: a new flow is dropped while every source port's flow is active", prepare: portHeld(false),
			in: full.synPkt().frame(), want: vDrop,
			check: func(e *fxEnv) {
				if _, ok := e.flow(cli4, ap(vipFull4, 80), protoTCP); ok {
					e.t.Error("a flow was recorded")
				}
				wantPortOwner(other)(e)
			},
		},
		{
			name: "fullnat: a source port whose flow is idle goes to a new flow", prepare: portHeld(true),
			in: full.synPkt().frame(), want: vRedirect, out: full.synPkt().from(snat4).to(ap(b2v4, 8080)).routed(macLBBackend, macB2).frame(),
			check: wantPortOwner(cli4),
		},
		{
			name: "fullnat: a source port whose flow is gone goes to a new flow",
			prepare: func(e *fxEnv) {
				e.put(e.objs.Replies, flowKeyOf(ap(b2v4, 8080), snat4, protoTCP), holder)
			},
			in: full.synPkt().frame(), want: vRedirect, out: full.synPkt().from(snat4).to(ap(b2v4, 8080)).routed(macLBBackend, macB2).frame(),
			check: wantPortOwner(cli4),
		},
		{name: "a service without backends drops (fallback drop)", in: tcpPkt(cli4, ap(vipEmpty4, 80)).frame(), want: vDrop},
		{name: "a service without backends passes (fallback reject)", in: tcpPkt(cli4, ap(vipEmpty4, 81)).frame(), want: vPass},
		{
			name: "TTL 1 to a VIP passes untouched", in: withTTL(ack, 1).frame(), want: vPass,
			check: func(e *fxEnv) {
				if _, ok := e.flow(cli4, ap(vipNat4, 80), protoTCP); ok {
					e.t.Error("a flow was recorded")
				}
			},
		},
	}
}

// routeFixtures: next hops without a neighbour entry or a route.
func routeFixtures() []fixture {
	nat := tcpPkt(cli4, ap(vipNoNeigh4, 80))
	dsr := tcpPkt(cli4, ap(vipNoNeigh4, 81))
	unrouted := tcpPkt(cli4, ap(vipUnrouted4, 80))
	nat4, dsr4 := tcpPkt(cli4, ap(vipNat4, 80)).synPkt(), tcpPkt(cli4, ap(vipDSR4, 80)).synPkt()
	dsr6 := tcpPkt(cli6, ap(vipDSR6, 80)).synPkt()
	fwdDisabled := func(service, backend uint32) func(e *fxEnv) {
		return func(e *fxEnv) { e.wantCounts(service, backend, false, sluiceUnforwarded{FwdDisabled: 1}) }
	}
	return []fixture{
		{
			name: "nat: no neighbour: tc lets bpf_redirect_neigh resolve it, XDP leaves it to the stack rewritten",
			in:   nat.frame(), want: vRedirect, wantXDP: vPass,
			out:    withTTL(nat.to(ap(noNeigh4, 80)), 63).frame(),
			outXDP: nat.to(ap(noNeigh4, 80)).frame(),
			check:  func(e *fxEnv) { e.wantCounts(15, 5, true, sluiceUnforwarded{}) },
		},
		{
			name: "dsr: no neighbour: tc lets bpf_redirect_neigh resolve it, untouched; XDP drops and counts it",
			in:   dsr.frame(), want: vRedirect, wantXDP: vDrop, tcUntouched: true,
			check: func(e *fxEnv) {
				if e.hook == hookXDP {
					e.wantCounts(16, 5, false, sluiceUnforwarded{NoNeigh: 1})
				} else {
					e.wantCounts(16, 5, true, sluiceUnforwarded{})
				}
			},
		},
		{
			name: "no route to the backend: dropped and counted, not forwarded", in: unrouted.frame(), want: vDrop,
			check: func(e *fxEnv) { e.wantCounts(17, 6, false, sluiceUnforwarded{NoRoute: 1}) },
		},
		{
			name: "nat: forwarding off on the client side: dropped and counted, not forwarded", prepare: forwardingOff("cli0"),
			in: nat4.frame(), want: vDrop, check: fwdDisabled(1, 1),
		},
		{
			name: "dsr: forwarding off on the client side: dropped and counted, not forwarded", prepare: forwardingOff("cli0"),
			in: dsr4.frame(), want: vDrop, check: fwdDisabled(5, 1),
		},
		{
			name: "dsr over IPv6: forwarding off on the client side: dropped and counted, not forwarded", prepare: forwardingOff("cli0"),
			in: dsr6.frame(), want: vDrop, check: fwdDisabled(11, 3),
		},
	}
}

// replyFixtures: backends' replies of nat and fullnat flows.
func replyFixtures() []fixture {
	first := func(p pkt) func(e *fxEnv) { return func(e *fxEnv) { e.send(p.frame(), false) } }
	fromRemote := tcpPkt(ap(remote4, 40001), ap(vipNat4, 80)).synPkt()
	fromRemote.srcMAC = macRouter
	nat := tcpPkt(ap(b1v4, 80), cli4).fromBackend(macB1)
	natUDP := udpPkt(ap(b2v4, 8080), cli4).fromBackend(macB2)
	full := tcpPkt(ap(b2v4, 8080), snat4).fromBackend(macB2)
	nat6 := tcpPkt(ap(b1v6, 80), cli6).fromBackend(macB1)
	full6 := udpPkt(ap(b1v6, 53), snat6).fromBackend(macB1)
	toRemote := tcpPkt(ap(b1v4, 80), ap(remote4, 40001)).fromBackend(macB1)
	return []fixture{
		{
			name: "nat: a reply leaves from the VIP", prepare: first(tcpPkt(cli4, ap(vipNat4, 80)).synPkt()), in: nat.frame(), fromBackend: true,
			want: vRedirect, out: nat.from(ap(vipNat4, 80)).routed(macLBClient, macClient).frame(),
		},
		{
			name: "nat: a reply with forwarding off on the backend side: dropped, counted under the service",
			prepare: func(e *fxEnv) {
				first(tcpPkt(cli4, ap(vipNat4, 80)).synPkt())(e)
				forwardingOff("srv0")(e)
			},
			in: nat.frame(), fromBackend: true, want: vDrop,
			check: func(e *fxEnv) { e.wantCounts(1, 1, true, sluiceUnforwarded{FwdDisabled: 1}) },
		},
		{
			name: "nat: a UDP reply from another port", prepare: first(udpPkt(cli4, ap(vipNat4, 53))), in: natUDP.frame(), fromBackend: true,
			want: vRedirect, out: natUDP.from(ap(vipNat4, 53)).routed(macLBClient, macClient).frame(),
		},
		{
			name: "fullnat: a reply goes back to the client", prepare: first(tcpPkt(cli4, ap(vipFull4, 80)).synPkt()), in: full.frame(), fromBackend: true,
			want: vRedirect, out: full.from(ap(vipFull4, 80)).to(cli4).routed(macLBClient, macClient).frame(),
		},
		{
			name: "nat: an IPv6 reply", prepare: first(tcpPkt(cli6, ap(vipNat6, 80)).synPkt()), in: nat6.frame(), fromBackend: true,
			want: vRedirect, out: nat6.from(ap(vipNat6, 80)).routed(macLBClient, macClient).frame(),
		},
		{
			name: "fullnat: an IPv6 UDP reply", prepare: first(udpPkt(cli6, ap(vipFull6, 53))), in: full6.frame(), fromBackend: true,
			want: vRedirect, out: full6.from(ap(vipFull6, 53)).to(cli6).routed(macLBClient, macClient).frame(),
		},
		{
			name: "nat: a reply to a client behind a router goes to the router", prepare: first(fromRemote), in: toRemote.frame(), fromBackend: true,
			want: vRedirect, out: toRemote.from(ap(vipNat4, 80)).routed(macLBClient, macRouter).frame(),
		},
		{
			name: "a reply with TTL 1 passes", prepare: first(tcpPkt(cli4, ap(vipNat4, 80)).synPkt()), in: withTTL(nat, 1).frame(), fromBackend: true,
			want: vPass,
		},
	}
}

// icmpFixtures: ICMP errors about tracked flows reach the right side, translated.
func icmpFixtures() []fixture {
	first := func(p pkt) func(e *fxEnv) { return func(e *fxEnv) { e.send(p.frame(), false) } }

	// an error from the backend side about a packet sent to a backend
	natUDP := udpPkt(cli4, ap(vipNat4, 53))
	toB2 := withTTL(natUDP.to(ap(b2v4, 8080)), 63)
	unreach := icmpErr{srcMAC: macB2, dstMAC: macLBBackend, src: b2v4, dst: client4, typ: 3, code: 3, inner: toB2, quote: 1000}
	unreachOut := unreach.routed(macLBClient, macClient)
	unreachOut.src, unreachOut.inner = vipNat4, withTTL(natUDP, 63)
	viaRouter := unreach
	viaRouter.src, viaRouter.code, viaRouter.mtu = mustAddr("10.0.2.254"), 4, 1400
	viaRouterOut := unreachOut
	viaRouterOut.src, viaRouterOut.code, viaRouterOut.mtu = viaRouter.src, 4, 1400

	// an error from the client side about a reply sent from a VIP
	natSyn := tcpPkt(cli4, ap(vipNat4, 80)).synPkt()
	reply := withTTL(tcpPkt(ap(vipNat4, 80), cli4), 63)
	fragNeeded := icmpErr{srcMAC: macRouter, dstMAC: macLBClient, src: router4, dst: vipNat4, typ: 3, code: 4, mtu: 1400, inner: reply, quote: 1000}
	fragNeededOut := fragNeeded.routed(macLBBackend, macB1)
	fragNeededOut.dst, fragNeededOut.inner = b1v4, reply.from(ap(b1v4, 80))
	short := fragNeeded
	short.quote = 28
	shortOut := fragNeededOut
	shortOut.quote = 28

	dsrReply := withTTL(tcpPkt(ap(vipDSR4, 80), cli4), 63)
	dsrFrag := icmpErr{srcMAC: macRouter, dstMAC: macLBClient, src: router4, dst: vipDSR4, typ: 3, code: 4, mtu: 1400, inner: dsrReply, quote: 1000}
	dsr6Reply := withTTL(tcpPkt(ap(vipDSR6, 80), cli6), 63)
	dsr6TooBig := icmpErr{srcMAC: macRouter, dstMAC: macLBClient, src: router6, dst: vipDSR6, typ: 2, mtu: 1280, inner: dsr6Reply, quote: 1000}

	nat6Syn := tcpPkt(cli6, ap(vipNat6, 80)).synPkt()
	nat6Reply := withTTL(tcpPkt(ap(vipNat6, 80), cli6), 63)
	nat6TooBig := icmpErr{srcMAC: macRouter, dstMAC: macLBClient, src: router6, dst: vipNat6, typ: 2, mtu: 1280, inner: nat6Reply, quote: 1000}
	nat6TooBigOut := nat6TooBig.routed(macLBBackend, macB1)
	nat6TooBigOut.dst, nat6TooBigOut.inner = b1v6, nat6Reply.from(ap(b1v6, 80))
	toB1v6 := withTTL(nat6Syn.to(ap(b1v6, 80)), 63)
	b6TooBig := icmpErr{srcMAC: macB1, dstMAC: macLBBackend, src: b1v6, dst: client6, typ: 2, mtu: 1280, inner: toB1v6, quote: 1000}
	b6TooBigOut := b6TooBig.routed(macLBClient, macClient)
	b6TooBigOut.src, b6TooBigOut.inner = vipNat6, withTTL(nat6Syn, 63)

	fullUDP := udpPkt(cli4, ap(vipFull4, 53))
	fullToB1 := withTTL(fullUDP.from(snat4).to(ap(b1v4, 53)), 63)
	fullUnreach := icmpErr{srcMAC: macB1, dstMAC: macLBBackend, src: b1v4, dst: lbBackend4, typ: 3, code: 3, inner: fullToB1, quote: 1000}
	fullUnreachOut := fullUnreach.routed(macLBClient, macClient)
	fullUnreachOut.src, fullUnreachOut.dst, fullUnreachOut.inner = vipFull4, client4, withTTL(fullUDP, 63)
	fullSyn := tcpPkt(cli4, ap(vipFull4, 80)).synPkt()
	fullReply := withTTL(tcpPkt(ap(vipFull4, 80), cli4), 63)
	fullFrag := icmpErr{srcMAC: macRouter, dstMAC: macLBClient, src: router4, dst: vipFull4, typ: 3, code: 4, mtu: 1400, inner: fullReply, quote: 1000}
	fullFragOut := fullFrag.routed(macLBBackend, macB2)
	fullFragOut.src, fullFragOut.dst, fullFragOut.inner = lbBackend4, b2v4, fullReply.from(ap(b2v4, 8080)).to(snat4)
	full6UDP := udpPkt(cli6, ap(vipFull6, 53))
	full6ToB1 := withTTL(full6UDP.from(snat6).to(ap(b1v6, 53)), 63)
	full6Unreach := icmpErr{srcMAC: macB1, dstMAC: macLBBackend, src: b1v6, dst: lbBackend6, typ: 1, code: 4, inner: full6ToB1, quote: 1000}
	full6UnreachOut := full6Unreach.routed(macLBClient, macClient)
	full6UnreachOut.src, full6UnreachOut.dst, full6UnreachOut.inner = vipFull6, client6, withTTL(full6UDP, 63)

	unknown := fragNeeded
	unknown.inner = reply.to(ap(client4, 45555))
	noPorts := fragNeeded
	noPorts.quote = 20
	return []fixture{
		{name: "nat: a backend's port unreachable reaches the client from the VIP", prepare: first(natUDP), in: unreach.frame(), fromBackend: true, want: vRedirect, out: unreachOut.frame()},
		{name: "nat: a backend-side router's error keeps its source", prepare: first(natUDP), in: viaRouter.frame(), fromBackend: true, want: vRedirect, out: viaRouterOut.frame()},
		{name: "nat: a client-side fragmentation needed reaches the backend", prepare: first(natSyn), in: fragNeeded.frame(), want: vRedirect, out: fragNeededOut.frame()},
		{name: "nat: an error quoting 8 bytes of TCP (no checksum) is translated", prepare: first(natSyn), in: short.frame(), want: vRedirect, out: shortOut.frame()},
		{name: "dsr: a fragmentation needed reaches the flow's backend", prepare: first(tcpPkt(cli4, ap(vipDSR4, 80)).synPkt()), in: dsrFrag.frame(), want: vRedirect, out: dsrFrag.routed(macLBBackend, macB1).frame()},
		{name: "dsr: a fragmentation needed for an unknown flow goes to Maglev's pick", in: dsrFrag.frame(), want: vRedirect, out: dsrFrag.routed(macLBBackend, macB1).frame()},
		{name: "dsr: an IPv6 packet too big reaches the backend", in: dsr6TooBig.frame(), want: vRedirect, out: dsr6TooBig.routed(macLBBackend, macB1).frame()},
		{name: "nat: an IPv6 client-side packet too big reaches the backend", prepare: first(nat6Syn), in: nat6TooBig.frame(), want: vRedirect, out: nat6TooBigOut.frame()},
		{name: "nat: an IPv6 backend's packet too big reaches the client", prepare: first(nat6Syn), in: b6TooBig.frame(), fromBackend: true, want: vRedirect, out: b6TooBigOut.frame()},
		{name: "fullnat: a backend's port unreachable reaches the client", prepare: first(fullUDP), in: fullUnreach.frame(), fromBackend: true, want: vRedirect, out: fullUnreachOut.frame()},
		{name: "fullnat: a client-side fragmentation needed reaches the backend", prepare: first(fullSyn), in: fullFrag.frame(), want: vRedirect, out: fullFragOut.frame()},
		{name: "fullnat: an IPv6 backend's unreachable reaches the client", prepare: first(full6UDP), in: full6Unreach.frame(), fromBackend: true, want: vRedirect, out: full6UnreachOut.frame()},
		{name: "an error about an unknown nat flow passes", prepare: first(natSyn), in: unknown.frame(), want: vPass},
		{name: "an error quoting no ports passes", prepare: first(natSyn), in: noPorts.frame(), want: vPass},
		{name: "an error quoting IP options passes", prepare: first(natSyn), in: patched(fragNeeded.frame(), 14+20+8, 0x46), want: vPass},
		{name: "an error with TTL 1 passes", prepare: first(natSyn), in: withICMPTTL(fragNeeded, 1).frame(), want: vPass},
	}
}

// malformedFixtures: broken frames pass untouched, whatever they claim to be.
func malformedFixtures() []fixture {
	tcp4 := tcpPkt(cli4, ap(vipNat4, 80)).frame()
	ipLen := len(tcp4) - 14
	rawTCP := tcpPkt(cli4, ap(vipNat4, 80))
	rawTCP.proto, rawTCP.payload = unix.IPPROTO_RAW, make([]byte, 10)
	shortTCP := patched(rawTCP.frame(), 14+9, protoTCP) // a 10-byte "TCP header", checksums aside
	rawUDP := udpPkt(cli4, ap(vipNat4, 53))
	rawUDP.proto, rawUDP.payload = unix.IPPROTO_RAW, make([]byte, 4)
	shortUDP := patched(rawUDP.frame(), 14+9, protoUDP)
	tcp6 := tcpPkt(cli6, ap(vipNat6, 80)).frame()
	udp4 := udpPkt(cli4, ap(vipNat4, 53)).frame()
	udpLen := len(udp4) - 14 - 20
	return []fixture{
		{name: "an Ethernet header alone passes", in: tcp4[:14], want: vPass, onlyXDP: true},
		{name: "a truncated IPv4 header passes", in: tcp4[:14+12], want: vPass, onlyXDP: true},
		{name: "an IPv4 header length below 5 passes", in: patched(tcp4, 14, 0x44), want: vPass},
		{name: "an IPv4 header length beyond the total length passes", in: patched(tcp4, 14, 0x4f), want: vPass},
		{name: "an IPv4 total length beyond the frame passes", in: patched(tcp4, 16, byte((ipLen+1)>>8), byte(ipLen+1)), want: vPass},
		{name: "an IPv4 total length below the header passes", in: patched(tcp4, 16, 0, 16), want: vPass},
		{name: "an IPv4 version other than 4 passes", in: patched(tcp4, 14, 0x65), want: vPass},
		{name: "an IPv4 first fragment passes", in: patched(tcp4, 14+6, 0x20, 0), want: vPass},
		{name: "an IPv4 later fragment passes", in: patched(tcp4, 14+6, 0, 0x10), want: vPass},
		{name: "a truncated TCP header passes", in: shortTCP, want: vPass},
		{name: "a TCP data offset below 5 passes", in: patched(tcp4, 14+20+12, 0x40), want: vPass},
		{name: "a TCP data offset beyond the packet passes", in: patched(tcp4, 14+20+12, 0xf0), want: vPass},
		{name: "a truncated UDP header passes", in: shortUDP, want: vPass},
		{name: "a UDP length beyond the IP payload passes", in: patched(udp4, 14+20+4, byte((udpLen+1)>>8), byte(udpLen+1)), want: vPass},
		{name: "a UDP length below its header's passes", in: patched(udp4, 14+20+4, 0, 7), want: vPass},
		{name: "a truncated IPv6 header passes", in: tcp6[:14+30], want: vPass, onlyXDP: true},
		{name: "an IPv6 payload length beyond the frame passes", in: patched(tcp6, 14+4, 0x05, 0xdc), want: vPass},
		{name: "an IPv6 fragment header passes", in: patched(tcp6, 14+6, 44), want: vPass},
		{name: "an IPv6 hop-by-hop header passes", in: patched(tcp6, 14+6, 0), want: vPass},
		{name: "an IPv6 frame with an IPv4 header passes", in: patched(tcp6, 14, 0x45), want: vPass},
	}
}

// withTTL is p with a TTL.
func withTTL(p pkt, ttl uint8) pkt {
	p.ttl = ttl
	return p
}

// withICMPTTL is e with a TTL.
func withICMPTTL(e icmpErr, ttl uint8) icmpErr {
	e.ttl = ttl
	return e
}

// patched is a copy of frame with bytes b at off.
func patched(frame []byte, off int, b ...byte) []byte {
	out := bytes.Clone(frame)
	copy(out[off:], b)
	return out
}

// vlanTagged is frame with an 802.1Q tag (VLAN 10).
func vlanTagged(frame []byte) []byte {
	tag := binary.BigEndian.AppendUint16([]byte{0x81, 0x00}, 10)
	return append(append(bytes.Clone(frame[:12]), tag...), frame[12:]...)
}

// wireAddrOf is an address in the contract's layout.
func wireAddrOf(a netip.Addr) [16]byte {
	w, _ := wireAddr(a)
	return w
}
