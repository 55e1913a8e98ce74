package ebpf

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/vishvananda/netlink"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/netnstest"
)

// Mode tunnel's fixtures: the fixture network (prog_test.go) plus a router on srv0 (10.0.2.254,
// fd00:2::fe) to the routed backends' subnets 10.0.3.0/24 and fd00:3::/64, and tun0, a device of
// MTU 1300 to backends 10.0.4.11 and fd00:4::11, for the packets that no longer fit once
// encapsulated.
var (
	macSrvRouter     = mustMAC("02:00:00:00:02:fe")
	macSmall         = mustMAC("02:00:00:00:04:01") // tun0
	macSmallB        = mustMAC("02:00:00:00:04:0b")
	srvRouter4       = mustAddr("10.0.2.254")
	srvRouter6       = mustAddr("fd00:2::fe")
	routed4, routed6 = mustAddr("10.0.3.11"), mustAddr("fd00:3::11")
	small4, small6   = mustAddr("10.0.4.11"), mustAddr("fd00:4::11")
	lbSmall4         = mustAddr("10.0.4.1")
	vipTun4, vipTun6 = mustAddr("10.0.9.7"), mustAddr("fd00:9::7")
	vipBig4, vipBig6 = mustAddr("10.0.9.8"), mustAddr("fd00:9::8")
	tunSource4       = mustAddr("10.0.2.50")
)

// smallMTU is tun0's MTU.
const smallMTU = 1300

// tunService is a tunnel service of the fixture world.
type tunService struct {
	fxService
	tunnel sluiceTunnel
}

// tunBackends are the tunnel fixtures' backends by id.
var tunBackends = map[uint32]netip.Addr{20: routed4, 21: routed6, 22: small4, 23: small6}

// tunServices are the tunnel fixtures' services.
func tunServices() []tunService {
	ipip := sluiceTunnel{Kind: sluiceTunnelKindTUNNEL_IPIP}
	gue := sluiceTunnel{Kind: sluiceTunnelKindTUNNEL_GUE, GuePort: wirePort(6080)}
	own := ipip
	own.Src, _ = wireAddr(tunSource4)
	return append([]tunService{
		{fxService{40, vipTun4, 80, protoTCP, config.ModeTunnel, "drop", []uint32{20}}, ipip},
		{fxService{41, vipTun4, 53, protoUDP, config.ModeTunnel, "drop", []uint32{20}}, gue},
		{fxService{42, vipTun6, 80, protoTCP, config.ModeTunnel, "drop", []uint32{21}}, ipip},
		{fxService{43, vipTun6, 53, protoUDP, config.ModeTunnel, "drop", []uint32{21}}, gue},
		{fxService{44, vipBig4, 80, protoTCP, config.ModeTunnel, "drop", []uint32{22}}, ipip},
		{fxService{45, vipBig6, 80, protoTCP, config.ModeTunnel, "drop", []uint32{23}}, gue},
		{fxService{46, vipTun4, 81, protoTCP, config.ModeTunnel, "drop", []uint32{20}}, own},
	}, mixedTunServices(ipip, gue, own)...)
}

// buildTunnelNet adds the router and tun0 to the fixture network.
func buildTunnelNet(tb testing.TB, n *fxNet) {
	netnstest.In(tb, n.ns, func() {
		small := fxVeth(tb, "tun0", macSmall, "10.0.4.1/24", "fd00:4::1/64")
		link, err := netlink.LinkByIndex(int(small))
		if err == nil {
			err = netlink.LinkSetMTU(link, smallMTU)
		}
		if err != nil {
			tb.Fatal(err)
		}
		for _, nb := range []struct {
			ip  netip.Addr
			mac net.HardwareAddr
			dev uint32
		}{
			{srvRouter4, macSrvRouter, n.backend}, {srvRouter6, macSrvRouter, n.backend},
			{small4, macSmallB, small}, {small6, macSmallB, small},
		} {
			neigh := &netlink.Neigh{LinkIndex: int(nb.dev), State: netlink.NUD_PERMANENT, IP: nb.ip.AsSlice(), HardwareAddr: nb.mac}
			if err := netlink.NeighAdd(neigh); err != nil {
				tb.Fatalf("neighbour %v: %v", nb.ip, err)
			}
		}
		for _, r := range []struct {
			dst string
			gw  netip.Addr
		}{{"10.0.3.0/24", srvRouter4}, {"fd00:3::/64", srvRouter6}} {
			_, dst, _ := net.ParseCIDR(r.dst)
			if err := netlink.RouteAdd(&netlink.Route{LinkIndex: int(n.backend), Dst: dst, Gw: r.gw.AsSlice()}); err != nil {
				tb.Fatalf("route to %v: %v", dst, err)
			}
		}
	})
}

// resetTunnels writes the tunnel services and backends into e's maps, over the fixture world.
func (e *fxEnv) resetTunnels() {
	for id, a := range tunBackends {
		addr, family := wireAddr(a)
		e.put(e.objs.Backends, id, sluiceBackend{Addr: addr, Family: family, Flags: sluiceBackendFlagsBACKEND_VALID})
	}
	for _, s := range tunServices() {
		e.setRing(s.id, s.ring...)
		e.put(e.objs.ServiceTunnels, s.id, s.tunnel)
		e.put(e.objs.TunnelStats, s.id, make([]sluiceTunnelCounts, ebpf.MustPossibleCPU()))
		e.put(e.objs.Vips, vipKeyOf(s.vip, s.port, s.proto), sluiceService{
			Id: s.id, RingOffset: s.id * fxRingSize, RingSize: fxRingSize, Mode: wireModes[s.mode],
		})
	}
}

// tunnelCounts reads a tunnel service's counters.
func (e *fxEnv) tunnelCounts(id uint32) datapath.TunnelCounts {
	e.t.Helper()
	var per []sluiceTunnelCounts
	if err := e.objs.TunnelStats.Lookup(id, &per); err != nil {
		e.t.Fatal(err)
	}
	return tunnelCountsOf(per)
}

// withTOS is an IPv4 frame with its TOS byte set (checksum fixed), or an IPv6 frame with its
// traffic class set.
func withTOS(frame []byte, tos uint8) []byte {
	f := bytes.Clone(frame)
	if f[14]>>4 == 4 {
		f[15] = tos
		binary.BigEndian.PutUint16(f[24:], 0)
		binary.BigEndian.PutUint16(f[24:], ipv4Checksum(f[14:34]))
		return f
	}
	f[14] = 6<<4 | tos>>4
	f[15] = f[15]&0x0f | tos<<4
	return f
}

// ipv4Checksum is the checksum of an IPv4 header whose checksum field is 0.
func ipv4Checksum(h []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		s += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// innerHeader is what the outer header of a tunnel packet takes from the inner one: the protocol
// (next header) it announces, the inner DSCP/ECN and, for IPv4 inside, its DF bit.
type innerHeader struct {
	proto layers.IPProtocol
	tos   uint8
	df    layers.IPv4Flag
}

// innerOf reads what the outer header of inner (an IP packet) takes from it; gue: UDP follows.
func innerOf(inner []byte, gue bool) innerHeader {
	h := innerHeader{proto: layers.IPProtocolIPv4, tos: inner[1], df: layers.IPv4Flag(inner[6]>>5) & layers.IPv4DontFragment}
	if inner[0]>>4 == 6 {
		h = innerHeader{proto: layers.IPProtocolIPv6, tos: inner[0]<<4 | inner[1]>>4}
	}
	if gue {
		h.proto = layers.IPProtocolUDP
	}
	return h
}

// encapsulated is what a tunnel frame must be: the input's IP packet, unchanged, after an outer
// header of dst's family (IPv4 or IPv6 inside either) from src to dst with the protocol, TTL 64
// and the inner DSCP/ECN, and for GUE a UDP header to port 6080 from a port of 32768-65535; it
// returns the GUE source port, or the IPv6 flow label.
func encapsulated(t *testing.T, out, in []byte, src, dst netip.Addr, gue bool) uint32 {
	t.Helper()
	inner := in[14:]
	want := innerOf(inner, gue)
	pk := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
	var payload []byte
	var entropy uint32
	if ip4, ok := pk.NetworkLayer().(*layers.IPv4); ok {
		h := bytes.Clone(out[14:34])
		check := binary.BigEndian.Uint16(h[10:])
		binary.BigEndian.PutUint16(h[10:], 0)
		switch {
		case binary.BigEndian.Uint16(out[12:]) != uint16(layers.EthernetTypeIPv4):
			t.Errorf("EtherType %#x, want IPv4", out[12:14])
		case ip4.Protocol != want.proto, ip4.TTL != 64, ip4.IHL != 5:
			t.Errorf("outer header: protocol %v TTL %d IHL %d, want %v, 64, 5", ip4.Protocol, ip4.TTL, ip4.IHL, want.proto)
		case ip4.TOS != want.tos:
			t.Errorf("outer TOS %#x, want the inner's %#x", ip4.TOS, want.tos)
		case ip4.Flags&layers.IPv4DontFragment != want.df, ip4.FragOffset != 0:
			t.Errorf("outer flags %v offset %d, want DF %v", ip4.Flags, ip4.FragOffset, want.df)
		case want.df != 0 && ip4.Id != 0:
			t.Errorf("outer identification %#x of an atomic datagram (DF), want 0", ip4.Id)
		case check != ipv4Checksum(h):
			t.Errorf("outer checksum %#x, want %#x", check, ipv4Checksum(h))
		case int(ip4.Length) != len(out)-14:
			t.Errorf("outer length %d, frame %d", ip4.Length, len(out))
		}
		checkAddrs(t, ip4.SrcIP, ip4.DstIP, src, dst)
		payload = out[34:]
	} else if ip6, ok := pk.NetworkLayer().(*layers.IPv6); ok {
		switch {
		case binary.BigEndian.Uint16(out[12:]) != uint16(layers.EthernetTypeIPv6):
			t.Errorf("EtherType %#x, want IPv6", out[12:14])
		case ip6.NextHeader != want.proto, ip6.HopLimit != 64:
			t.Errorf("outer header: next header %v hop limit %d, want %v, 64", ip6.NextHeader, ip6.HopLimit, want.proto)
		case ip6.TrafficClass != want.tos:
			t.Errorf("outer traffic class %#x, want the inner's %#x", ip6.TrafficClass, want.tos)
		case int(ip6.Length) != len(out)-54:
			t.Errorf("outer payload length %d, frame %d", ip6.Length, len(out))
		}
		checkAddrs(t, ip6.SrcIP, ip6.DstIP, src, dst)
		payload, entropy = out[54:], ip6.FlowLabel
	} else {
		t.Fatalf("no outer IP header:\n%s", dump(out))
	}
	if _, is4 := pk.NetworkLayer().(*layers.IPv4); is4 != dst.Is4() {
		t.Errorf("the outer header is not of the backend %v's family", dst)
	}
	if gue {
		sport, dport, ulen, check := binary.BigEndian.Uint16(payload), binary.BigEndian.Uint16(payload[2:]), binary.BigEndian.Uint16(payload[4:]), binary.BigEndian.Uint16(payload[6:])
		if sport < 32768 || dport != 6080 || int(ulen) != len(payload) || check != 0 {
			t.Errorf("GUE UDP header %d -> %d length %d checksum %#x, want 32768+ -> 6080, %d, 0", sport, dport, ulen, check, len(payload))
		}
		payload, entropy = payload[8:], uint32(sport)
	}
	if !bytes.Equal(payload, inner) {
		t.Errorf("the inner packet changed:\n%s\nwant:\n%s", dump(append(bytes.Clone(in[:14]), payload...)), dump(in))
	}
	return entropy
}

// checkAddrs checks an outer header's addresses.
func checkAddrs(t *testing.T, gotSrc, gotDst net.IP, src, dst netip.Addr) {
	t.Helper()
	s, _ := netip.AddrFromSlice(gotSrc)
	d, _ := netip.AddrFromSlice(gotDst)
	if s.Unmap() != src || d.Unmap() != dst {
		t.Errorf("outer %v -> %v, want %v -> %v", s, d, src, dst)
	}
}

// runTunnel runs a tunnel fixture's frame, received on cli0.
func (e *fxEnv) runTunnel(frame []byte) (uint32, []byte) {
	e.t.Helper()
	return e.hook.run(e.t, e.objs, frame, e.net.client)
}

// The return codes a tunnel packet leaves with.
const (
	tcRedirect  = 7 // TC_ACT_REDIRECT
	xdpRedirect = 4 // XDP_REDIRECT
	xdpTx       = 3 // XDP_TX
)

// TestTunnelFixtures runs mode tunnel's packets through both hooks: the outer header, its
// checksum, GUE's port entropy, TTL and DSCP, the route through a router, the outer source, the
// flow table, and ICMP too big for what no longer fits.
func TestTunnelFixtures(t *testing.T) {
	n := newFxNet(t)
	buildTunnelNet(t, n)
	for _, h := range []hook{hookTC, hookXDP} {
		e := newFxEnv(t, h, n)
		redirect := map[hook]uint32{hookTC: tcRedirect, hookXDP: xdpRedirect}[h]
		prepare := func(t *testing.T) {
			n.enter(t)
			e.reset(t)
			e.resetTunnels()
		}
		forward := func(t *testing.T, in []byte, src, dst netip.Addr, gue bool) uint32 {
			t.Helper()
			ret, out := e.runTunnel(in)
			if ret != redirect {
				t.Fatalf("return code %d, want %d (redirect)", ret, redirect)
			}
			wantMACs := append(bytes.Clone(macSrvRouter), macLBBackend...)
			if h == hookTC {
				wantMACs = in[:12] // bpf_redirect_neigh writes them on the way out
			}
			if !bytes.Equal(out[:12], wantMACs) {
				t.Errorf("MACs %x, want %x", out[:12], wantMACs)
			}
			return encapsulated(t, out, in, src, dst, gue)
		}
		for _, c := range []struct {
			name     string
			in       []byte
			src, dst netip.Addr
			gue      bool
			service  uint32
		}{
			{"ipip: IPv4 TCP to a routed backend", tcpPkt(cli4, ap(vipTun4, 80)).synPkt().frame(), lbBackend4, routed4, false, 40},
			{"ipip: DSCP and ECN copied", withTOS(tcpPkt(cli4, ap(vipTun4, 80)).frame(), 0xb9), lbBackend4, routed4, false, 40},
			{"ipip: the inner TTL is not touched", withTTL(tcpPkt(cli4, ap(vipTun4, 80)), 3).frame(), lbBackend4, routed4, false, 40},
			{"gue: IPv4 UDP", udpPkt(cli4, ap(vipTun4, 53)).frame(), lbBackend4, routed4, true, 41},
			{"ipip: IPv6 in IPv6", tcpPkt(cli6, ap(vipTun6, 80)).synPkt().frame(), lbBackend6, routed6, false, 42},
			{"ipip: IPv6 traffic class copied", withTOS(tcpPkt(cli6, ap(vipTun6, 80)).frame(), 0xb9), lbBackend6, routed6, false, 42},
			{"gue: IPv6 UDP", udpPkt(cli6, ap(vipTun6, 53)).frame(), lbBackend6, routed6, true, 43},
			{"ipip: the service's own tunnel source", tcpPkt(cli4, ap(vipTun4, 81)).frame(), tunSource4, routed4, false, 46},
			// the other family's backends (tunnel64_test.go): the outer header is theirs
			{"6in4 ipip: IPv6 TCP in IPv4 protocol 41", tcpPkt(cli6, ap(vip6in4, 80)).synPkt().frame(), lbBackend4, routed4, false, 47},
			{"6in4 ipip: the traffic class is the outer TOS", withTOS(tcpPkt(cli6, ap(vip6in4, 80)).frame(), 0xb9), lbBackend4, routed4, false, 47},
			{"6in4 ipip: the inner hop limit is not touched", withTTL(tcpPkt(cli6, ap(vip6in4, 80)), 3).frame(), lbBackend4, routed4, false, 47},
			{"6in4 gue: IPv6 UDP in GUE over IPv4", withTOS(udpPkt(cli6, ap(vip6in4, 53)).frame(), 0x2e), lbBackend4, routed4, true, 48},
			{"6in4 ipip: the service's own tunnel source", tcpPkt(cli6, ap(vip6in4, 81)).frame(), tunSource4, routed4, false, 51},
			{"4in6 ipip: IPv4 TCP in IPv6 next header 4", withTOS(tcpPkt(cli4, ap(vip4in6, 80)).frame(), 0xb9), lbBackend6, routed6, false, 49},
			{"4in6 gue: IPv4 UDP in GUE over IPv6", udpPkt(cli4, ap(vip4in6, 53)).frame(), lbBackend6, routed6, true, 50},
		} {
			t.Run(h.String()+"/"+c.name, func(t *testing.T) {
				prepare(t)
				forward(t, c.in, c.src, c.dst, c.gue)
				if got := e.tunnelCounts(c.service); got != (datapath.TunnelCounts{Encapsulated: 1}) {
					t.Errorf("tunnel counters %+v, want 1 encapsulated", got)
				}
				if s := e.stats(e.objs.ServiceStats, c.service); s.Packets != 1 || s.Flows != 1 {
					t.Errorf("service counters %+v, want 1 packet, 1 flow", s)
				}
			})
		}
		for _, c := range []struct {
			name   string
			client netip.Addr
			vip    netip.Addr
		}{{"gue", client4, vipTun4}, {"6in4 gue", client6, vip6in4}} {
			t.Run(h.String()+"/"+c.name+": the source port is the flow's, and flows spread", func(t *testing.T) {
				prepare(t)
				ports := map[uint32]bool{}
				for i := range uint16(16) {
					in := udpPkt(ap(c.client, 40000+i), ap(c.vip, 53)).frame()
					p := forward(t, in, lbBackend4, routed4, true)
					if again := forward(t, in, lbBackend4, routed4, true); again != p {
						t.Errorf("flow %d: source port %d then %d", i, p, again)
					}
					ports[p] = true
				}
				if len(ports) < 12 {
					t.Errorf("16 flows took %d source ports", len(ports))
				}
			})
		}
		t.Run(h.String()+"/ipip: the flow keeps its backend (flow table, as dsr)", func(t *testing.T) {
			prepare(t)
			forward(t, tcpPkt(cli4, ap(vipTun4, 80)).synPkt().frame(), lbBackend4, routed4, false)
			if f, ok := e.flow(cli4, ap(vipTun4, 80), protoTCP); !ok || f.BackendId != 20 || f.ServiceId != 40 {
				t.Errorf("flow %+v (found %v), want backend 20 of service 40", f, ok)
			}
			if _, ok := e.reply(ap(routed4, 80), cli4, protoTCP); ok {
				t.Error("a tunnel flow has a reply entry: its replies bypass the balancer")
			}
		})
		for _, c := range []struct {
			name     string
			in       pkt
			overhead int
			service  uint32
		}{
			{"ICMP fragmentation needed for an IPv4 packet too big once encapsulated", bigPkt(cli4, vipBig4), 20, 44},
			{"ICMPv6 packet too big for an IPv6 packet too big once encapsulated", bigPkt(cli6, vipBig6), 48, 45},
			// the other family's backends: the outer family's overhead; 1290 bytes fit tun0 (1300)
			// as they are, not once encapsulated
			{"6in4 ipip: ICMPv6 packet too big for the MTU less 20", sized(cli6, vipBig6in4, smallMTU-10), 20, 52},
			{"6in4 gue: ICMPv6 packet too big for the MTU less 28", sized(cli6, vipBigGUE6in4, smallMTU-10), 28, 53},
			{"4in6 ipip: ICMP fragmentation needed for the MTU less 40", sized(cli4, vipBig4in6, smallMTU-10), 40, 54},
		} {
			t.Run(h.String()+"/"+c.name, func(t *testing.T) {
				prepare(t)
				in := c.in.frame()
				ret, out := e.runTunnel(in)
				want := map[hook]uint32{hookTC: tcRedirect, hookXDP: xdpTx}[h]
				if ret != want {
					t.Fatalf("return code %d, want %d; counters %+v", ret, want, e.tunnelCounts(c.service))
				}
				wantOut := tooBigFrame(c.in, smallMTU-c.overhead)
				if !bytes.Equal(out, wantOut) {
					t.Errorf("frame left:\n%s\nwant:\n%s\ndiff at byte %d", dump(out), dump(wantOut), firstDiff(out, wantOut))
				}
				if got := e.tunnelCounts(c.service); got != (datapath.TunnelCounts{TooBig: 1}) {
					t.Errorf("tunnel counters %+v, want 1 too big", got)
				}
				if s := e.stats(e.objs.ServiceStats, c.service); s.Packets != 0 {
					t.Errorf("service counters %+v, want no packet sent", s)
				}
			})
		}
		t.Run(h.String()+"/a packet that fits once encapsulated goes through tun0", func(t *testing.T) {
			prepare(t)
			p := bigPkt(cli4, vipBig4)
			p.payload = p.payload[:smallMTU-20-20-20]
			ret, out := e.runTunnel(p.frame())
			if ret != redirect {
				t.Fatalf("return code %d, want %d", ret, redirect)
			}
			encapsulated(t, out, p.frame(), lbSmall4, small4, false)
		})
		for _, c := range []struct {
			name     string
			in       pkt
			src, dst netip.Addr
		}{
			// the overhead of the outer family, not the inner's: 1280 + 20 fits, 1280 + 40 would not
			{"6in4 ipip: an IPv6 packet that fits with 20 bytes more goes through tun0", sized(cli6, vipBig6in4, smallMTU-20), lbSmall4, small4},
			{"4in6 ipip: an IPv4 packet that fits with 40 bytes more goes through tun0", sized(cli4, vipBig4in6, smallMTU-40), mustAddr("fd00:4::1"), small6},
		} {
			t.Run(h.String()+"/"+c.name, func(t *testing.T) {
				prepare(t)
				ret, out := e.runTunnel(c.in.frame())
				if ret != redirect {
					t.Fatalf("return code %d, want %d", ret, redirect)
				}
				encapsulated(t, out, c.in.frame(), c.src, c.dst, false)
			})
		}
	}
}

// bigPkt is a TCP segment to vip:80 that fits tun0's MTU, but not once encapsulated.
func bigPkt(client netip.AddrPort, vip netip.Addr) pkt {
	p := tcpPkt(client, ap(vip, 80))
	p.payload = bytes.Repeat([]byte{'x'}, smallMTU-50)
	return p
}

// tooBigFrame is the ICMP error the balancer answers p with, from the VIP, back to where p came
// from: fragmentation needed quoting 64 bytes of p, or packet too big quoting 128.
func tooBigFrame(p pkt, mtu int) []byte {
	e := icmpErr{srcMAC: p.dstMAC, dstMAC: p.srcMAC, src: p.dst.Addr(), dst: p.src.Addr(), mtu: uint16(mtu), inner: p, quote: 64}
	if p.src.Addr().Is4() {
		e.typ, e.code = 3, 4
	} else {
		e.typ, e.quote = 2, 128
	}
	return e.frame()
}
