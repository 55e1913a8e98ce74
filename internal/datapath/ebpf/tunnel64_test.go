package ebpf

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath"
)

// The tunnel fixtures' services whose backends are of the other family than their VIP: IPv6 in
// IPv4 (6in4) and IPv4 in IPv6 (4in6). The outer header is of the backend's family.
var (
	vip6in4, vip4in6       = mustAddr("fd00:9::9"), mustAddr("10.0.9.9")
	vipBig6in4, vipBig4in6 = mustAddr("fd00:9::a"), mustAddr("10.0.9.10")
	vipBigGUE6in4          = mustAddr("fd00:9::b")
)

// mixedTunServices are the tunnel fixtures' services over backends of the other family, with the
// fixture world's ipip and gue tunnels and ipip from tunSource4 (own).
func mixedTunServices(ipip, gue, own sluiceTunnel) []tunService {
	return []tunService{
		{fxService{47, vip6in4, 80, protoTCP, config.ModeTunnel, "drop", []uint32{20}}, ipip},
		{fxService{48, vip6in4, 53, protoUDP, config.ModeTunnel, "drop", []uint32{20}}, gue},
		{fxService{49, vip4in6, 80, protoTCP, config.ModeTunnel, "drop", []uint32{21}}, ipip},
		{fxService{50, vip4in6, 53, protoUDP, config.ModeTunnel, "drop", []uint32{21}}, gue},
		{fxService{51, vip6in4, 81, protoTCP, config.ModeTunnel, "drop", []uint32{20}}, own},
		{fxService{52, vipBig6in4, 80, protoTCP, config.ModeTunnel, "drop", []uint32{22}}, ipip},
		{fxService{53, vipBigGUE6in4, 80, protoTCP, config.ModeTunnel, "drop", []uint32{22}}, gue},
		{fxService{54, vipBig4in6, 80, protoTCP, config.ModeTunnel, "drop", []uint32{23}}, ipip},
	}
}

// sized is a TCP segment from client to vip:80 whose IP packet is l3 bytes long.
func sized(client netip.AddrPort, vip netip.Addr, l3 int) pkt {
	p := tcpPkt(client, ap(vip, 80))
	p.payload = nil
	p.payload = bytes.Repeat([]byte{'x'}, l3-len(p.ip()))
	return p
}

// TestTunnelFixturesMixedFamilies runs the packets of tunnel services whose backends are of the
// other family through both hooks: IPv6 in IPv4 (protocol 41, or GUE over IPv4) and IPv4 in IPv6
// (next header 4), the outer header of the backend's family routed by its FIB lookup, its
// checksum, TTL 64, the inner DSCP copied, GUE's port entropy, and ICMP too big computed with
// the outer family's overhead (20 or 28 bytes over IPv4, 40 over IPv6).
func TestTunnelFixturesMixedFamilies(t *testing.T) {
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
			return encapsulated(t, out, in, src, dst, gue)
		}
		for _, c := range []struct {
			name     string
			in       []byte
			src, dst netip.Addr
			gue      bool
			service  uint32
		}{
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
		t.Run(h.String()+"/6in4 gue: the source port is the flow's, and flows spread", func(t *testing.T) {
			prepare(t)
			ports := map[uint32]bool{}
			for i := range uint16(16) {
				in := udpPkt(ap(client6, 40000+i), ap(vip6in4, 53)).frame()
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
		for _, c := range []struct {
			name     string
			in       pkt
			overhead int
			service  uint32
		}{
			// 1290 bytes fit tun0 (1300) as they are, not once encapsulated
			{"6in4 ipip: ICMPv6 packet too big for the MTU less 20", sized(cli6, vipBig6in4, smallMTU-10), 20, 52},
			{"6in4 gue: ICMPv6 packet too big for the MTU less 28", sized(cli6, vipBigGUE6in4, smallMTU-10), 28, 53},
			{"4in6 ipip: ICMP fragmentation needed for the MTU less 40", sized(cli4, vipBig4in6, smallMTU-10), 40, 54},
		} {
			t.Run(h.String()+"/"+c.name, func(t *testing.T) {
				prepare(t)
				ret, out := e.runTunnel(c.in.frame())
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
			})
		}
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
				forward(t, c.in.frame(), c.src, c.dst, false)
			})
		}
	}
}
