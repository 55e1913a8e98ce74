package flowsync

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"syscall"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// readBuffer is the socket's receive buffer asked for.
const readBuffer = 4 << 20

// listen opens the sync socket in the calling thread's network namespace: bound to the port
// (and Interface, when set) and, with a group, joined to it on Interface with a TTL of 1 and no
// loopback of its own datagrams.
func listen(o *Options) (*net.UDPConn, error) {
	network, bind := "udp6", netip.IPv6Unspecified()
	if o.family().Is4() {
		network, bind = "udp4", netip.IPv4Unspecified()
	}
	if o.Address.IsValid() && !o.Group.IsValid() {
		bind = o.Address
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		return bindToDevice(c, o.Interface)
	}}
	pc, err := lc.ListenPacket(context.Background(), network, netip.AddrPortFrom(bind, uint16(o.Port)).String())
	if err != nil {
		return nil, fmt.Errorf("flowsync: listen on port %d: %w", o.Port, err)
	}
	conn := pc.(*net.UDPConn)
	// Room for a burst of a resync while the datapath imports (the kernel caps it at rmem_max).
	if err := conn.SetReadBuffer(readBuffer); err != nil {
		conn.Close()
		return nil, fmt.Errorf("flowsync: receive buffer: %w", err)
	}
	if o.Group.IsValid() {
		if err := joinGroup(conn, o.Interface, o.Group); err != nil {
			conn.Close()
			return nil, err
		}
	}
	return conn, nil
}

// bindToDevice binds the socket to the interface named ifname, if any.
func bindToDevice(c syscall.RawConn, ifname string) error {
	if ifname == "" {
		return nil
	}
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptString(int(fd), unix.SOL_SOCKET, unix.SO_BINDTODEVICE, ifname)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("flowsync: bind to interface %s: %w", strconv.Quote(ifname), serr)
	}
	return nil
}

// joinGroup joins group on the interface named ifname and sends to it from there, with a TTL
// (hop limit) of 1 and without looping the socket's own datagrams back.
func joinGroup(conn *net.UDPConn, ifname string, group netip.Addr) error {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return fmt.Errorf("flowsync: interface %q: %w", ifname, err)
	}
	ga := &net.UDPAddr{IP: group.AsSlice()}
	var steps []func() error
	if group.Is4() {
		p := ipv4.NewPacketConn(conn)
		steps = []func() error{
			func() error { return p.JoinGroup(ifi, ga) },
			func() error { return p.SetMulticastInterface(ifi) },
			func() error { return p.SetMulticastTTL(1) },
			func() error { return p.SetMulticastLoopback(false) },
		}
	} else {
		p := ipv6.NewPacketConn(conn)
		steps = []func() error{
			func() error { return p.JoinGroup(ifi, ga) },
			func() error { return p.SetMulticastInterface(ifi) },
			func() error { return p.SetMulticastHopLimit(1) },
			func() error { return p.SetMulticastLoopback(false) },
		}
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("flowsync: join group %s on %s: %w", group, ifname, err)
		}
	}
	return nil
}
