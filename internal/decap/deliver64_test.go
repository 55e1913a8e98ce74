package decap

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// udpTo is a client's UDP datagram to vip:5353 holding payload, as an IP packet.
func udpTo(client, vip netip.Addr, payload string) []byte {
	ip := &layers.IPv6{Version: 6, HopLimit: 61, NextHeader: layers.IPProtocolUDP, SrcIP: client.AsSlice(), DstIP: vip.AsSlice()}
	udp := &layers.UDP{SrcPort: 40001, DstPort: 5353}
	_ = udp.SetNetworkLayerForChecksum(ip)
	return serialize(ip, udp, gopacket.Payload(payload))
}

// TestDecapDeliversIPv6InIPv4: in a network namespace, 6in4 packets (IPIP protocol 41, and GUE
// over IPv4) arriving on a veth the program is attached to reach a UDP socket on the host's IPv6
// VIP: the stack takes the inner packet as IPv6 once its outer IPv4 header is gone.
func TestDecapDeliversIPv6InIPv4(t *testing.T) {
	dc0, dc1 := enterWithVeth(t)
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	a4, _ := netlink.ParseAddr(host4.String() + "/24")
	a6, _ := netlink.ParseAddr(vip6.String() + "/128")
	a6.Flags = unix.IFA_F_NODAD
	for _, step := range []func() error{
		func() error { return netlink.AddrAdd(dc0, a4) },
		func() error { return netlink.LinkSetUp(lo) },
		func() error { return netlink.AddrAdd(lo, a6) },
		func() error { return netlink.LinkSetUp(dc0) },
		func() error { return netlink.LinkSetUp(dc1) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := net.ListenUDP("udp6", &net.UDPAddr{IP: vip6.AsSlice(), Port: 5353})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	o := Options{PinPath: privateBPFFS(t), Interface: "dc0", GUEPort: testGUEPort}
	if err := Attach(o); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Detach(o) })
	send := packetSender(t, dc1.Attrs().Index)
	mac0 := dc0.Attrs().HardwareAddr
	for _, c := range []struct{ name, payload string }{{"ipip", "6in4 ipip"}, {"gue", "6in4 gue"}} {
		frame := tunnelAs(lb4, host4, layers.IPProtocolIPv6, 0, udpTo(cli6, vip6, c.payload))
		if c.name == "gue" {
			frame = tunnel(lb4, host4, testGUEPort, udpTo(cli6, vip6, c.payload))
		}
		copy(frame, mac0)
		send(frame)
		buf := make([]byte, 64)
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, from, err := conn.ReadFromUDP(buf)
		if err != nil || string(buf[:n]) != c.payload || from.AddrPort().Addr() != cli6 {
			t.Errorf("%s: read %q from %v (%v), want %q from %v", c.name, buf[:n], from, err, c.payload, cli6)
		}
	}
	st, err := ReadStatus(o)
	if err != nil || st.Counts != (Counts{IPIP: 1, GUE: 1}) {
		t.Errorf("status %+v (%v), want 1 IPIP and 1 GUE decapsulated", st.Counts, err)
	}
}

// packetSender sends Ethernet frames out of interface ifindex with a packet socket, closed when
// the test ends.
func packetSender(t *testing.T, ifindex int) func([]byte) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	to := &unix.SockaddrLinklayer{Ifindex: ifindex, Halen: 6}
	return func(frame []byte) {
		t.Helper()
		if err := unix.Sendto(fd, frame, 0, to); err != nil {
			t.Fatal(err)
		}
	}
}
