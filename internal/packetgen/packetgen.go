// Package packetgen sends small IPv4 frames on an interface as fast as the kernel takes them:
// an AF_PACKET socket, sendmmsg(2) in batches, each frame given fresh source ports (and
// addresses) and correct checksums. Unlike trafgen, a full socket send buffer makes it wait, not
// exit: with the receiver's work steered to another CPU, the frames in flight fill the buffer
// whenever the receiver falls behind.
package packetgen

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Kind is what every frame carries.
type Kind int

const (
	// UDP datagrams from one source address and random source ports.
	UDP Kind = iota
	// SYN segments from random sources in Spec.SourceNet and random ports: each a new flow.
	SYN
)

// FrameLen is the length of every frame: Ethernet's minimum without the FCS.
const FrameLen = 60

// batch is how many frames one sendmmsg hands the kernel.
const batch = 64

// Spec describes the frames.
type Spec struct {
	Kind Kind
	// Interface sends the frames; DstMAC is the next hop's address, SrcMAC the interface's.
	Interface      string
	DstMAC, SrcMAC net.HardwareAddr
	// Source is the UDP frames' source; SourceNet the SYNs' (random addresses inside it).
	Source    netip.Addr
	SourceNet netip.Prefix
	// Destinations are used in turn (a VIP, or the reals themselves); DstPort is every frame's.
	Destinations []netip.Addr
	DstPort      uint16
}

// Check reports the first field that cannot make frames.
func (s Spec) Check() error {
	switch {
	case s.Interface == "":
		return errors.New("packetgen: no interface")
	case len(s.DstMAC) != 6 || len(s.SrcMAC) != 6:
		return errors.New("packetgen: the MAC addresses must be Ethernet's (6 bytes)")
	case len(s.Destinations) == 0:
		return errors.New("packetgen: no destination")
	case s.Kind == UDP && !s.Source.Is4():
		return errors.New("packetgen: UDP needs an IPv4 source")
	case s.Kind == SYN && (!s.SourceNet.Addr().Is4() || s.SourceNet.Bits() < 8):
		return errors.New("packetgen: SYN needs an IPv4 source network of /8 or longer")
	case s.Kind != UDP && s.Kind != SYN:
		return fmt.Errorf("packetgen: unknown kind %d", s.Kind)
	}
	for _, d := range s.Destinations {
		if !d.Is4() {
			return fmt.Errorf("packetgen: destination %s is not IPv4", d)
		}
	}
	return nil
}

// Send sends frames until ctx ends or d has passed and returns how many the kernel took. The
// caller's thread blocks in the kernel while the socket's send buffer is full; a frame the
// device drops (ENOBUFS) is left to the device's counters.
func Send(ctx context.Context, s Spec, d time.Duration) (uint64, error) {
	if err := s.Check(); err != nil {
		return 0, err
	}
	ifi, err := net.InterfaceByName(s.Interface)
	if err != nil {
		return 0, err
	}
	// Protocol 0: the socket sends only, it receives nothing.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("packetgen: AF_PACKET socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: ifi.Index}); err != nil {
		return 0, fmt.Errorf("packetgen: bind to %s: %w", s.Interface, err)
	}
	// veth's queue is noqueue: bypassing the qdisc layer only saves its lookups.
	_ = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1)

	g := newGenerator(s)
	deadline := time.Now().Add(d)
	var sent uint64
	for i := 0; ; i++ {
		if i%64 == 0 && (ctx.Err() != nil || !time.Now().Before(deadline)) {
			return sent, nil
		}
		g.fill()
		n, err := sendmmsg(fd, g.msgs[:])
		// ENOBUFS: the device dropped the frame after n (a veth whose peer's receive ring is
		// full counts it as a transmit drop); the rest of the batch is sent with the next one.
		if err != nil && !errors.Is(err, unix.EINTR) && !errors.Is(err, unix.ENOBUFS) {
			return sent, fmt.Errorf("packetgen: sendmmsg: %w", err)
		}
		sent += uint64(max(n, 0))
	}
}

// generator holds a batch of frames and rewrites their varying fields before each send.
type generator struct {
	spec   Spec
	frames [batch][FrameLen]byte
	iovs   [batch]unix.Iovec
	msgs   [batch]mmsghdr
	rng    uint64 // xorshift state
	next   int    // the next destination
}

// mmsghdr is struct mmsghdr of sendmmsg(2).
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}

func newGenerator(s Spec) *generator {
	g := &generator{spec: s, rng: uint64(time.Now().UnixNano()) | 1}
	for i := range g.frames {
		f := g.frames[i][:]
		copy(f[0:6], s.DstMAC)
		copy(f[6:12], s.SrcMAC)
		binary.BigEndian.PutUint16(f[12:14], unix.ETH_P_IP)
		ip := f[14:34]
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:4], FrameLen-14)
		ip[6] = 0x40 // don't fragment
		ip[8] = 64   // TTL
		if s.Kind == SYN {
			ip[9] = unix.IPPROTO_TCP
			tcp := f[34:54]
			binary.BigEndian.PutUint16(tcp[2:4], s.DstPort)
			tcp[12] = 5 << 4 // data offset: 20 bytes
			tcp[13] = 0x02   // SYN
			binary.BigEndian.PutUint16(tcp[14:16], 65535)
		} else {
			ip[9] = unix.IPPROTO_UDP
			src := s.Source.As4()
			copy(ip[12:16], src[:])
			udp := f[34:42]
			binary.BigEndian.PutUint16(udp[2:4], s.DstPort)
			binary.BigEndian.PutUint16(udp[4:6], FrameLen-34) // UDP checksum 0: none (IPv4)
		}
		g.iovs[i] = unix.Iovec{Base: &g.frames[i][0]}
		g.iovs[i].SetLen(FrameLen)
		g.msgs[i].hdr.Iov = &g.iovs[i]
		g.msgs[i].hdr.SetIovlen(1)
	}
	return g
}

func (g *generator) random() uint64 {
	g.rng ^= g.rng << 13
	g.rng ^= g.rng >> 7
	g.rng ^= g.rng << 17
	return g.rng
}

// fill gives every frame of the batch its destination, source port (1024-65535) and, for SYNs,
// source address and sequence number, and computes the checksums.
func (g *generator) fill() {
	for i := range g.frames {
		f := g.frames[i][:]
		ip := f[14:34]
		dst := g.spec.Destinations[g.next].As4()
		g.next = (g.next + 1) % len(g.spec.Destinations)
		copy(ip[16:20], dst[:])
		r := g.random()
		port := uint16(1024 + r%(65536-1024))
		binary.BigEndian.PutUint16(f[34:36], port)
		if g.spec.Kind == SYN {
			src := g.spec.SourceNet.Masked().Addr().As4()
			host := uint32(r>>16) & (1<<(32-g.spec.SourceNet.Bits()) - 1)
			binary.BigEndian.PutUint32(ip[12:16], binary.BigEndian.Uint32(src[:])|host)
			binary.BigEndian.PutUint32(f[38:42], uint32(r>>32)) // sequence number
			binary.BigEndian.PutUint16(f[50:52], 0)
			binary.BigEndian.PutUint16(f[50:52], tcpChecksum(ip, f[34:]))
		}
		binary.BigEndian.PutUint16(ip[10:12], 0)
		binary.BigEndian.PutUint16(ip[10:12], checksum(0, ip))
	}
}

// checksum is the Internet checksum (RFC 1071) of b, added to the partial sum sum.
func checksum(sum uint32, b []byte) uint16 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// tcpChecksum is the checksum of segment seg (its checksum field zero) with ip's pseudo-header.
// The segment is the whole IP payload, the frame's zero padding included: the pseudo-header's
// length is the IP payload's, as a receiver computes it from the IP header.
func tcpChecksum(ip, seg []byte) uint16 {
	sum := uint32(unix.IPPROTO_TCP) + uint32(len(seg))
	for i := 12; i < 20; i += 2 {
		sum += uint32(ip[i])<<8 | uint32(ip[i+1])
	}
	return checksum(sum, seg)
}

// sendmmsg sends msgs in one system call, waiting while the send buffer is full; it returns how
// many the kernel took.
func sendmmsg(fd int, msgs []mmsghdr) (int, error) {
	n, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), 0, 0, 0)
	if errno != 0 {
		return int(n), errno
	}
	return int(n), nil
}
