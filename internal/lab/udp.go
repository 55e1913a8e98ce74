package lab

import (
	"context"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// ServeUDP answers every datagram arriving on addr ("host:port"; an empty
// host serves IPv4 and IPv6) with reply, sent from the address the datagram
// was sent to, so replies to a VIP on lo (DSR) come from the VIP. It returns
// nil once ctx is done; failed sends of single replies are ignored.
func ServeUDP(ctx context.Context, addr string, reply []byte) error {
	conns, err := listenUDP(ctx, addr)
	if err != nil {
		return err
	}
	return serveUDP(ctx, conns, reply)
}

// listenUDP opens one socket per family that addr covers. The sockets are
// freebind so they may send from AnyIP addresses (IPv6 pktinfo otherwise
// rejects a source that is routed local but not configured on a link).
func listenUDP(ctx context.Context, addr string) ([]net.PacketConn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var targets [][2]string // network, address
	switch ip := net.ParseIP(host); {
	case host == "":
		targets = [][2]string{{"udp4", net.JoinHostPort("0.0.0.0", port)}, {"udp6", net.JoinHostPort("::", port)}}
	case ip == nil:
		return nil, fmt.Errorf("udp listen address %q: host must be an IP literal", addr)
	case ip.To4() != nil:
		targets = [][2]string{{"udp4", addr}}
	default:
		targets = [][2]string{{"udp6", addr}}
	}
	lc := net.ListenConfig{Control: freebind}
	var conns []net.PacketConn
	for _, t := range targets {
		c, err := lc.ListenPacket(ctx, t[0], t[1])
		if err != nil {
			for _, c := range conns {
				c.Close()
			}
			return nil, err
		}
		conns = append(conns, c)
	}
	return conns, nil
}

func freebind(network, _ string, rc syscall.RawConn) error {
	level, opt := unix.SOL_IP, unix.IP_FREEBIND
	if network == "udp6" {
		level, opt = unix.SOL_IPV6, unix.IPV6_FREEBIND
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), level, opt, 1) }); err != nil {
		return err
	}
	return serr
}

// serveUDP serves all conns until ctx is done or one of them fails, then closes them all.
func serveUDP(ctx context.Context, conns []net.PacketConn, reply []byte) error {
	closeAll := func() {
		for _, c := range conns {
			c.Close()
		}
	}
	stop := context.AfterFunc(ctx, closeAll)
	defer stop()
	errs := make(chan error, len(conns))
	for _, c := range conns {
		go func() {
			if c.LocalAddr().(*net.UDPAddr).IP.To4() != nil {
				errs <- serve4(ipv4.NewPacketConn(c), reply)
			} else {
				errs <- serve6(ipv6.NewPacketConn(c), reply)
			}
		}()
	}
	err := <-errs
	closeAll()
	for range len(conns) - 1 {
		<-errs
	}
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func serve4(p *ipv4.PacketConn, reply []byte) error {
	if err := p.SetControlMessage(ipv4.FlagDst, true); err != nil {
		return err
	}
	buf := make([]byte, 64<<10)
	for {
		_, cm, src, err := p.ReadFrom(buf)
		if err != nil {
			return err
		}
		var out *ipv4.ControlMessage
		if cm != nil {
			out = &ipv4.ControlMessage{Src: cm.Dst}
		}
		_, _ = p.WriteTo(reply, out, src)
	}
}

func serve6(p *ipv6.PacketConn, reply []byte) error {
	if err := p.SetControlMessage(ipv6.FlagDst, true); err != nil {
		return err
	}
	buf := make([]byte, 64<<10)
	for {
		_, cm, src, err := p.ReadFrom(buf)
		if err != nil {
			return err
		}
		var out *ipv6.ControlMessage
		if cm != nil {
			out = &ipv6.ControlMessage{Src: cm.Dst}
		}
		_, _ = p.WriteTo(reply, out, src)
	}
}
