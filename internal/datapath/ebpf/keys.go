package ebpf

import "net/netip"

// Keys of the program's maps, built from netip values in the layout of bpf/structs.h (see
// wireAddr and wirePort).

// vipKeyOf is the vips key of a VIP's port and protocol (IPPROTO_TCP or IPPROTO_UDP).
func vipKeyOf(vip netip.Addr, port uint16, proto uint8) sluiceVipKey {
	addr, family := wireAddr(vip)
	return sluiceVipKey{Addr: addr, Port: wirePort(port), Proto: proto, Family: family}
}

// flowKeyOf is the flows or replies key of the packets from src to dst: flows holds a client's
// flow by flowKeyOf(client, vip), replies a translated flow by flowKeyOf(backend, client) for nat
// and flowKeyOf(backend, balancer address and port) for fullnat.
func flowKeyOf(src, dst netip.AddrPort, proto uint8) sluiceFlowKey {
	s, family := wireAddr(src.Addr())
	d, _ := wireAddr(dst.Addr())
	return sluiceFlowKey{
		Src: s, Dst: d,
		Sport: wirePort(src.Port()), Dport: wirePort(dst.Port()),
		Proto: proto, Family: family,
	}
}
