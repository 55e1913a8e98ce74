package health

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// The ICMP protocol numbers icmp.ParseMessage takes.
const (
	protocolICMP   = 1
	protocolICMPv6 = 58
)

// echoData is the payload of a check's echo request.
var echoData = []byte("sluice-health-check")

// icmpChecker passes when the target answers an echo request (keepalived's PING_CHECK). It
// uses an unprivileged ping socket where net.ipv4.ping_group_range lets the daemon's group open
// one (it covers IPv6 too), else a raw socket.
type icmpChecker struct{}

// icmpFamily is how one address family pings: its sockets, protocol and message types.
type icmpFamily struct {
	ping, raw      string // networks of icmp.ListenPacket
	any            string
	protocol       int
	request, reply icmp.Type
}

var (
	icmpV4 = icmpFamily{"udp4", "ip4:icmp", "0.0.0.0", protocolICMP, ipv4.ICMPTypeEcho, ipv4.ICMPTypeEchoReply}
	icmpV6 = icmpFamily{"udp6", "ip6:ipv6-icmp", "::", protocolICMPv6, ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply}
)

// listen opens a ping socket, or a raw one when the ping socket is not allowed; raw tells which.
func (f icmpFamily) listen() (conn *icmp.PacketConn, raw bool, err error) {
	conn, err = icmp.ListenPacket(f.ping, f.any)
	if err == nil {
		return conn, false, nil
	}
	rawConn, rawErr := icmp.ListenPacket(f.raw, f.any)
	if rawErr != nil {
		return nil, true, errors.Join(err, rawErr)
	}
	return rawConn, true, nil
}

func (icmpChecker) Check(ctx context.Context, target netip.AddrPort) Result {
	start := time.Now()
	addr := target.Addr().Unmap()
	family := icmpV6
	if addr.Is4() {
		family = icmpV4
	}
	conn, raw, err := family.listen()
	if err != nil {
		return failed(start, "cannot open an ICMP socket: "+err.Error())
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	// A ping socket sets the ID itself (to its port) and gets only its own replies; a raw
	// socket gets every echo reply, told apart by ID.
	echo := &icmp.Echo{ID: int(rand.Uint32() & 0xffff), Seq: int(rand.Uint32() & 0xffff), Data: echoData}
	request, err := (&icmp.Message{Type: family.request, Body: echo}).Marshal(nil)
	if err != nil {
		return failed(start, err.Error())
	}
	var dst net.Addr = &net.UDPAddr{IP: addr.AsSlice(), Zone: addr.Zone()}
	if raw {
		dst = &net.IPAddr{IP: addr.AsSlice(), Zone: addr.Zone()}
	}
	if _, err := conn.WriteTo(request, dst); err != nil {
		return networkFailure(ctx, start, err)
	}
	buf := make([]byte, 1500)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			if reason, ok := interrupted(ctx, start); ok {
				return failed(start, "no echo reply: "+reason)
			}
			return networkFailure(ctx, start, err)
		}
		if isEchoReply(buf[:n], from, addr, family, echo, raw) {
			return passed(start, "echo reply")
		}
	}
}

// isEchoReply tells whether packet, from from, is the reply of target to echo.
func isEchoReply(packet []byte, from net.Addr, target netip.Addr, family icmpFamily, echo *icmp.Echo, raw bool) bool {
	var source netip.Addr
	switch a := from.(type) {
	case *net.UDPAddr:
		source = a.AddrPort().Addr()
	case *net.IPAddr:
		source, _ = netip.AddrFromSlice(a.IP)
	}
	if source.Unmap().WithZone("") != target.WithZone("") {
		return false
	}
	m, err := icmp.ParseMessage(family.protocol, packet)
	if err != nil || m.Type != family.reply {
		return false
	}
	reply, ok := m.Body.(*icmp.Echo)
	return ok && reply.Seq == echo.Seq && (!raw || reply.ID == echo.ID)
}
