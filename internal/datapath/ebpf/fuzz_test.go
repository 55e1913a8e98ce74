package ebpf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/testutil"
)

// FuzzProgram runs both hooks (tc and XDP) through BPF_PROG_TEST_RUN on fuzzed frames, seeded with
// every fixture frame and truncations of them, in the fixture world (fixtures_test.go) plus two
// port ranges and a few established flows. On every frame, received on either side:
//
//	(a) the run succeeds with a verdict the hook knows;
//	(b) a frame gopacket does not decode as a well-formed IPv4/IPv6 TCP/UDP packet to a VIP or
//	    of a tracked reply, or as an ICMP error about one (checksums aside), is never forwarded;
//	(c) a frame passed to the stack that is no such traffic is unchanged, byte for byte;
//	(d) one packet adds at most one entry to each of flows, replies and persist.
//
// One loaded program serves every input. Its flows, replies and persist maps are put back as set
// up after every run: an input then has the same outcome alone as in a sequence, so a failure the
// fuzzer reports reproduces from its one file, and (b) knows which replies are tracked.
func FuzzProgram(f *testing.F) {
	if os.Geteuid() != 0 {
		testutil.Missing(f, "needs root: loads BPF programs")
	}
	w := &fuzzWorld{net: newFxNet(f), objs: loadUnpinned(f, testMapSizes)}
	for _, fx := range fixtures() {
		f.Add(fx.in, fx.fromBackend)
		for _, n := range []int{14, 14 + 20, 14 + 40, len(fx.in) / 2, len(fx.in) - 1} {
			if n < len(fx.in) {
				f.Add(fx.in[:n], fx.fromBackend)
			}
		}
	}
	f.Fuzz(func(t *testing.T, frame []byte, fromBackend bool) {
		w.net.enter(t)
		if w.vips == nil {
			w.setUp(t)
		}
		ifindex, own := w.net.client, macLBClient
		if fromBackend {
			ifindex, own = w.net.backend, macLBBackend
		}
		frame = frame[:min(len(frame), maxFuzzFrame)]
		ok := w.explained(frame, own)
		for _, h := range []hook{hookTC, hookXDP} {
			ret, out, err := h.try(w.objs, frame, ifindex)
			if errors.Is(err, unix.EINVAL) && h.refuses(frame) {
				continue
			}
			if err != nil {
				t.Fatalf("%s: running: %v\n%s", h, err, dump(frame))
			}
			v, known := h.fuzzVerdict(ret)
			switch {
			case !known:
				t.Errorf("%s: return code %d is no verdict of the hook\n%s", h, ret, dump(frame))
			case v == vRedirect && !ok:
				t.Errorf("%s: forwarded a frame that is no VIP traffic, tracked reply or ICMP error about either\n%s", h, dump(frame))
			case v == vPass && !ok && !bytes.Equal(out, frame):
				t.Errorf("%s: passed a frame that is no VIP traffic rewritten, at byte %d\n%s\nleft:\n%s", h, firstDiff(out, frame), dump(frame), dump(out))
			}
			w.restore(t, h)
		}
	})
}

// maxFuzzFrame bounds a fuzzed frame: BPF_PROG_TEST_RUN takes a frame up to about a page.
const maxFuzzFrame = 2048

// fuzzRanges are the port ranges of the fuzz world: one vips entry per port, one service.
var fuzzRanges = []struct {
	fxService
	last uint16
}{
	{fxService{18, vipNat4, 8000, protoTCP, "nat", "drop", []uint32{7}}, 8003},
	{fxService{19, vipFull6, 8000, protoUDP, "fullnat", "drop", []uint32{3}}, 8003},
}

// fuzzFlows are the first packets of the flows established in the fuzz world: nat, fullnat and dsr,
// TCP and UDP, IPv4 and IPv6.
func fuzzFlows() []pkt {
	return []pkt{
		tcpPkt(cli4, ap(vipNat4, 80)).synPkt(), udpPkt(cli4, ap(vipNat4, 53)), tcpPkt(cli4, ap(vipFull4, 80)).synPkt(),
		tcpPkt(cli4, ap(vipDSR4, 80)).synPkt(), tcpPkt(cli6, ap(vipNat6, 80)).synPkt(), udpPkt(cli6, ap(vipFull6, 53)),
		tcpPkt(cli4, ap(vipNat4, 8001)).synPkt(), udpPkt(cli6, ap(vipFull6, 8002)),
	}
}

// fuzzWorld is the program fuzz inputs run on, and what it held once set up.
type fuzzWorld struct {
	net     *fxNet
	objs    *sluiceObjects
	vips    map[sluiceVipKey]bool
	replies map[sluiceFlowKey]bool
	state   []stateMap
}

// stateMap is a map the program writes per packet, with its entries as set up.
type stateMap struct {
	name string
	m    *ebpf.Map
	base map[string][]byte
}

// setUp writes the fuzz world into the maps, on the first input's test (fxEnv.reset takes a
// *testing.T, which a fuzz target gets only per input).
func (w *fuzzWorld) setUp(t *testing.T) {
	e := &fxEnv{t: t, hook: hookTC, objs: w.objs, net: w.net}
	e.reset(t)
	for _, r := range fuzzRanges {
		e.setRing(r.id, r.ring...)
		for port := r.port; port <= r.last; port++ {
			e.put(w.objs.Vips, vipKeyOf(r.vip, port, r.proto), sluiceService{
				Id: r.id, RingOffset: r.id * fxRingSize, RingSize: fxRingSize, Mode: wireModes[r.mode], Fallback: wireFallbacks[r.fallback],
			})
		}
	}
	for _, p := range fuzzFlows() {
		e.send(p.frame(), false)
	}
	w.vips = keysOf[sluiceVipKey](t, w.objs.Vips)
	w.replies = keysOf[sluiceFlowKey](t, w.objs.Replies)
	w.state = []stateMap{{name: "flows", m: w.objs.Flows}, {name: "replies", m: w.objs.Replies}, {name: "persist", m: w.objs.Persist}}
	for i := range w.state {
		w.state[i].base = entries(t, w.state[i].m)
	}
}

// restore puts the state maps back as set up after a run of hook h, and fails the test when the
// run added more than one entry to one of them.
func (w *fuzzWorld) restore(t *testing.T, h hook) {
	t.Helper()
	for _, s := range w.state {
		now := entries(t, s.m)
		added := 0
		for k, v := range now {
			base, ok := s.base[k]
			switch {
			case !ok:
				added++
				if err := s.m.Delete([]byte(k)); err != nil {
					t.Fatalf("%s: %v", s.name, err)
				}
			case !bytes.Equal(v, base):
				if err := s.m.Put([]byte(k), base); err != nil {
					t.Fatalf("%s: %v", s.name, err)
				}
			}
		}
		for k, base := range s.base {
			if _, ok := now[k]; !ok {
				if err := s.m.Put([]byte(k), base); err != nil {
					t.Fatalf("%s: %v", s.name, err)
				}
			}
		}
		if added > 1 {
			t.Errorf("%s: one packet added %d entries to %s", h, added, s.name)
		}
	}
}

// entries are a map's entries, raw, by raw key.
func entries(t *testing.T, m *ebpf.Map) map[string][]byte {
	t.Helper()
	all := map[string][]byte{}
	var k, v []byte
	it := m.Iterate()
	for it.Next(&k, &v) {
		all[string(k)] = bytes.Clone(v)
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return all
}

// keysOf are a map's keys.
func keysOf[K comparable](t *testing.T, m *ebpf.Map) map[K]bool {
	t.Helper()
	keys := map[K]bool{}
	var k K
	var v []byte
	it := m.Iterate()
	for it.Next(&k, &v) {
		keys[k] = true
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return keys
}

// try runs the hook's program once on frame received on ifindex, as run does, but returns an
// error rather than failing the test.
func (h hook) try(objs *sluiceObjects, frame []byte, ifindex uint32) (uint32, []byte, error) {
	out := make([]byte, len(frame)+256)
	opts := ebpf.RunOptions{Data: frame, DataOut: out, Context: h.runContext(len(frame), ifindex)}
	ret, err := h.program(objs).Run(&opts)
	return ret, opts.DataOut, err
}

// refuses says whether BPF_PROG_TEST_RUN refuses frame on the hook (EINVAL): a frame shorter than
// an Ethernet header, and on tc one shorter than the IPv4 or IPv6 header its ethertype announces.
func (h hook) refuses(frame []byte) bool {
	if len(frame) < 14 {
		return true
	}
	typ := layers.EthernetType(binary.BigEndian.Uint16(frame[12:]))
	return h == hookTC && (typ == layers.EthernetTypeIPv4 && len(frame) < 14+20 || typ == layers.EthernetTypeIPv6 && len(frame) < 14+40)
}

// fuzzVerdict reads a return code as verdictOf does, XDP_TX (a frame sent back out) counting as
// forwarded; false for a code the hook does not know.
func (h hook) fuzzVerdict(ret uint32) (verdict, bool) {
	if h == hookXDP && ret == 3 {
		return vRedirect, true
	}
	v := h.verdictOf(ret)
	return v, v != 0
}

// explained says whether the program may forward frame, received on the interface whose MAC is own:
// gopacket decodes it, strictly but for checksums, as a frame for own (or broadcast/multicast)
// holding an IPv4 (no fragment) or IPv6 (no extension header) packet with TCP or UDP to a VIP or
// of a tracked reply, or an ICMP error about such a packet.
func (w *fuzzWorld) explained(frame []byte, own net.HardwareAddr) bool {
	var (
		eth   layers.Ethernet
		ip4   layers.IPv4
		ip6   layers.IPv6
		tcp   layers.TCP
		udp   layers.UDP
		icmp4 layers.ICMPv4
		icmp6 layers.ICMPv6
		found []gopacket.LayerType
	)
	parser := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &eth, &ip4, &ip6, &tcp, &udp, &icmp4, &icmp6)
	parser.IgnoreUnsupported = true // the payload (what follows the L4 header) is not decoded
	if parser.DecodeLayers(unchecked(frame), &found) != nil || parser.Truncated || len(found) != 3 {
		return false
	}
	if eth.DstMAC[0]&1 == 0 && !bytes.Equal(eth.DstMAC, own) {
		return false
	}
	var src, dst netip.Addr
	switch found[1] {
	case layers.LayerTypeIPv4:
		tot := binary.BigEndian.Uint16(frame[14+2:])
		if ip4.Version != 4 || tot == 0 || ip4.Flags&layers.IPv4MoreFragments != 0 || ip4.FragOffset != 0 {
			return false
		}
		src, dst = addrOf(ip4.SrcIP), addrOf(ip4.DstIP)
	case layers.LayerTypeIPv6:
		if ip6.Version != 6 || ip6.HopByHop != nil {
			return false
		}
		src, dst = addrOf(ip6.SrcIP), addrOf(ip6.DstIP)
	}
	switch found[2] {
	case layers.LayerTypeTCP:
		return w.tracked(ap(src, uint16(tcp.SrcPort)), ap(dst, uint16(tcp.DstPort)), protoTCP)
	case layers.LayerTypeUDP:
		return w.tracked(ap(src, uint16(udp.SrcPort)), ap(dst, uint16(udp.DstPort)), protoUDP)
	case layers.LayerTypeICMPv4:
		typ := icmp4.TypeCode.Type()
		return src.Is4() && (typ == layers.ICMPv4TypeDestinationUnreachable || typ == layers.ICMPv4TypeTimeExceeded) &&
			w.quotesTracked(dst, icmp4.Payload)
	case layers.LayerTypeICMPv6:
		typ := icmp6.TypeCode.Type()
		return src.Is6() && len(icmp6.Payload) >= 4 && (typ == layers.ICMPv6TypeDestinationUnreachable ||
			typ == layers.ICMPv6TypePacketTooBig || typ == layers.ICMPv6TypeTimeExceeded) &&
			w.quotesTracked(dst, icmp6.Payload[4:])
	}
	return false
}

// unchecked is a copy of frame with what the program does not check made well formed, so that
// explained does not hold it against the frame: the IPv4 options become NOPs (the program skips
// them whole, as IHL says; a finding of this fuzz target, left as it is: the backend's kernel
// judges the options it receives). The UDP length, the target's other finding, is checked by the
// program now (parse.h): a datagram whose length disagrees with its IP payload passes.
func unchecked(frame []byte) []byte {
	out := bytes.Clone(frame)
	if len(out) < 14+20 || binary.BigEndian.Uint16(out[12:]) != uint16(layers.EthernetTypeIPv4) {
		return out
	}
	ip := out[14:]
	hlen, tot := int(ip[0]&0xf)*4, int(binary.BigEndian.Uint16(ip[2:]))
	if ip[0]>>4 != 4 || hlen < 20 || tot < hlen || tot > len(ip) {
		return out
	}
	for i := 20; i < hlen; i++ {
		ip[i] = 1 // NOP
	}
	return out
}

// quotesTracked says whether an ICMP error to dst quotes a packet dst sent (an IPv4 header without
// options and no later fragment, or an IPv6 one without extension headers, and 8 bytes of TCP or
// UDP) to a VIP or of a tracked reply. Like the kernel reading an error, it reads no more of the
// quoted header: a quote is a truncated packet, whose lengths say what was sent, not what is quoted.
func (w *fuzzWorld) quotesTracked(dst netip.Addr, quote []byte) bool {
	var src, to netip.Addr
	var proto uint8
	var l4 []byte
	switch {
	case dst.Is4() && len(quote) >= 20 && quote[0] == 0x45 && binary.BigEndian.Uint16(quote[6:])&0x1fff == 0:
		src, to = netip.AddrFrom4([4]byte(quote[12:16])), netip.AddrFrom4([4]byte(quote[16:20]))
		proto, l4 = quote[9], quote[20:]
	case dst.Is6() && len(quote) >= 40 && quote[0]>>4 == 6:
		src, to = netip.AddrFrom16([16]byte(quote[8:24])), netip.AddrFrom16([16]byte(quote[24:40]))
		proto, l4 = quote[6], quote[40:]
	default:
		return false
	}
	if src != dst || len(l4) < 8 || (proto != protoTCP && proto != protoUDP) {
		return false
	}
	from := ap(src, binary.BigEndian.Uint16(l4))
	back := ap(to, binary.BigEndian.Uint16(l4[2:]))
	return w.tracked(back, from, proto)
}

// tracked says whether a packet from src to dst is sent to a VIP or is a tracked reply.
func (w *fuzzWorld) tracked(src, dst netip.AddrPort, proto uint8) bool {
	return w.vips[vipKeyOf(dst.Addr(), dst.Port(), proto)] || w.replies[flowKeyOf(src, dst, proto)]
}

// addrOf is a decoded IP address.
func addrOf(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a
}
