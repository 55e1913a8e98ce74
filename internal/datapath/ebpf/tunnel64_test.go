package ebpf

import (
	"bytes"
	"net/netip"

	"github.com/sluicelb/sluice/internal/config"
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
