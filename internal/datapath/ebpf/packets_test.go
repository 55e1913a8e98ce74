package ebpf

import (
	"encoding/binary"
	"net"
	"net/netip"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"
)

// Test frames, built with gopacket with every length and checksum computed: the expected output
// of a rewrite is built from scratch like its input, so comparing them checks the program's
// incremental checksums against full ones.

// pkt is a TCP or UDP frame (or any other IP protocol, with the payload as its only content).
type pkt struct {
	srcMAC, dstMAC net.HardwareAddr
	src, dst       netip.AddrPort
	proto          uint8
	ttl            uint8 // 64 when 0
	syn, ack       bool
	payload        []byte
	ipOptions      []layers.IPv4Option
	zeroUDPCsum    bool // send the UDP checksum as 0 (none, IPv4)
}

// tcpPkt is a TCP segment from src to dst carrying a few bytes, as a client sends it to the
// balancer (ACK set; see synPkt).
func tcpPkt(src, dst netip.AddrPort) pkt {
	return pkt{srcMAC: macClient, dstMAC: macLBClient, src: src, dst: dst, proto: unix.IPPROTO_TCP, ack: true, payload: []byte("GET / HTTP/1.0\r\n\r\n")}
}

// udpPkt is a UDP datagram from src to dst, as a client sends it to the balancer.
func udpPkt(src, dst netip.AddrPort) pkt {
	return pkt{srcMAC: macClient, dstMAC: macLBClient, src: src, dst: dst, proto: unix.IPPROTO_UDP, payload: []byte("query")}
}

// synPkt is p as a TCP SYN.
func (p pkt) synPkt() pkt {
	p.syn, p.ack, p.payload = true, false, nil
	return p
}

// fromBackend is p as a backend sends it to the balancer's backend-side interface.
func (p pkt) fromBackend(mac net.HardwareAddr) pkt {
	p.srcMAC, p.dstMAC = mac, macLBBackend
	return p
}

// routed is p forwarded by the balancer: MACs of the hop and TTL one less.
func (p pkt) routed(src, dst net.HardwareAddr) pkt {
	p.srcMAC, p.dstMAC = src, dst
	p.ttl = p.ttlOrDefault() - 1
	return p
}

// to is p with a new destination.
func (p pkt) to(dst netip.AddrPort) pkt {
	p.dst = dst
	return p
}

// from is p with a new source.
func (p pkt) from(src netip.AddrPort) pkt {
	p.src = src
	return p
}

// ttlOrDefault is p's TTL or hop limit.
func (p pkt) ttlOrDefault() uint8 {
	if p.ttl == 0 {
		return 64
	}
	return p.ttl
}

// l4 is p's transport layer, with its checksum's network layer.
func (p pkt) l4(nl gopacket.NetworkLayer) []gopacket.SerializableLayer {
	switch p.proto {
	case unix.IPPROTO_TCP:
		tcp := &layers.TCP{SrcPort: layers.TCPPort(p.src.Port()), DstPort: layers.TCPPort(p.dst.Port()), Seq: 1000, SYN: p.syn, ACK: p.ack, Window: 64240}
		if p.ack {
			tcp.Ack = 2000
		}
		_ = tcp.SetNetworkLayerForChecksum(nl)
		return []gopacket.SerializableLayer{tcp, gopacket.Payload(p.payload)}
	case unix.IPPROTO_UDP:
		udp := &layers.UDP{SrcPort: layers.UDPPort(p.src.Port()), DstPort: layers.UDPPort(p.dst.Port())}
		_ = udp.SetNetworkLayerForChecksum(nl)
		return []gopacket.SerializableLayer{udp, gopacket.Payload(p.payload)}
	}
	return []gopacket.SerializableLayer{gopacket.Payload(p.payload)}
}

// ipLayers are p's network and transport layers.
func (p pkt) ipLayers() []gopacket.SerializableLayer {
	if p.src.Addr().Is4() {
		ip := &layers.IPv4{Version: 4, TTL: p.ttlOrDefault(), Protocol: layers.IPProtocol(p.proto), Id: 0x1234, Flags: layers.IPv4DontFragment,
			SrcIP: p.src.Addr().AsSlice(), DstIP: p.dst.Addr().AsSlice(), Options: p.ipOptions}
		return append([]gopacket.SerializableLayer{ip}, p.l4(ip)...)
	}
	ip := &layers.IPv6{Version: 6, HopLimit: p.ttlOrDefault(), NextHeader: layers.IPProtocol(p.proto), SrcIP: p.src.Addr().AsSlice(), DstIP: p.dst.Addr().AsSlice()}
	return append([]gopacket.SerializableLayer{ip}, p.l4(ip)...)
}

// ip is p's IP packet.
func (p pkt) ip() []byte {
	b := serialize(p.ipLayers()...)
	if p.zeroUDPCsum {
		binary.BigEndian.PutUint16(b[p.ipHeaderLen()+6:], 0)
	}
	return b
}

// ipHeaderLen is the length of p's IP header.
func (p pkt) ipHeaderLen() int {
	if p.src.Addr().Is4() {
		n := 20
		for _, o := range p.ipOptions {
			n += max(int(o.OptionLength), 1)
		}
		return (n + 3) &^ 3
	}
	return 40
}

// frame is p's Ethernet frame.
func (p pkt) frame() []byte {
	return append(ethHeader(p.srcMAC, p.dstMAC, p.src.Addr()), p.ip()...)
}

// icmpErr is an ICMP or ICMPv6 error frame quoting the first quote bytes of packet inner.
type icmpErr struct {
	srcMAC, dstMAC net.HardwareAddr
	src, dst       netip.Addr
	ttl            uint8 // 64 when 0
	typ, code      uint8
	mtu            uint16 // of fragmentation needed and packet too big
	inner          pkt
	quote          int
}

// frame is e's Ethernet frame.
func (e icmpErr) frame() []byte {
	ttl := e.ttl
	if ttl == 0 {
		ttl = 64
	}
	quoted := e.inner.ip()
	quoted = quoted[:min(e.quote, len(quoted))]
	var l []gopacket.SerializableLayer
	if e.src.Is4() {
		ip := &layers.IPv4{Version: 4, TTL: ttl, Protocol: layers.IPProtocolICMPv4, SrcIP: e.src.AsSlice(), DstIP: e.dst.AsSlice()}
		icmp := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(e.typ, e.code), Seq: e.mtu}
		l = []gopacket.SerializableLayer{ip, icmp, gopacket.Payload(quoted)}
	} else {
		ip := &layers.IPv6{Version: 6, HopLimit: ttl, NextHeader: layers.IPProtocolICMPv6, SrcIP: e.src.AsSlice(), DstIP: e.dst.AsSlice()}
		icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(e.typ, e.code)}
		_ = icmp.SetNetworkLayerForChecksum(ip)
		body := binary.BigEndian.AppendUint32(nil, uint32(e.mtu))
		l = []gopacket.SerializableLayer{ip, icmp, gopacket.Payload(append(body, quoted...))}
	}
	return append(ethHeader(e.srcMAC, e.dstMAC, e.src), serialize(l...)...)
}

// routed is e forwarded by the balancer: MACs of the hop and TTL one less.
func (e icmpErr) routed(src, dst net.HardwareAddr) icmpErr {
	e.srcMAC, e.dstMAC = src, dst
	if e.ttl == 0 {
		e.ttl = 64
	}
	e.ttl--
	return e
}

// ethHeader is an Ethernet header for an IP packet of a's family (built by hand: gopacket pads
// a lone Ethernet layer to the 60-byte minimum frame).
func ethHeader(src, dst net.HardwareAddr, a netip.Addr) []byte {
	typ := layers.EthernetTypeIPv6
	if a.Is4() {
		typ = layers.EthernetTypeIPv4
	}
	h := append(append([]byte{}, dst...), src...)
	return binary.BigEndian.AppendUint16(h, uint16(typ))
}

// serialize builds layers with lengths and checksums computed.
func serialize(l ...gopacket.SerializableLayer) []byte {
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, l...); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

// ap is an address and port.
func ap(a netip.Addr, port uint16) netip.AddrPort { return netip.AddrPortFrom(a, port) }
