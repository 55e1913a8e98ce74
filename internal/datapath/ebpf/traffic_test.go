package ebpf

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/ethtool"
	"github.com/sluicelb/sluice/internal/netnstest"
	"github.com/sluicelb/sluice/internal/testutil"
)

// Real traffic through the attached program: a client, a balancer and a backend namespace joined
// by veth pairs, the kernels' own TCP and UDP on both ends. What BPF_PROG_TEST_RUN cannot show is
// shown here: a local sender's skbs on veth carry CHECKSUM_PARTIAL checksums (and TCP sends GSO
// super-packets), neighbours start unresolved, and the replies' translation has to agree with
// real sockets.

// The traffic lab's addresses: the client is 10.0.1.10 / fd00:1::10 behind cli0, the backend
// 10.0.2.11 / fd00:2::11 behind srv0; nat and fullnat services send to its port 8080, dsr ones to
// the VIP (held on the backend's loopback) on port 80.
var (
	trafficVIPs = map[string][2]netip.Addr{
		"nat":     {mustAddr("10.0.9.1"), mustAddr("fd00:9::1")},
		"fullnat": {mustAddr("10.0.9.2"), mustAddr("fd00:9::2")},
		"dsr":     {mustAddr("10.0.9.3"), mustAddr("fd00:9::3")},
	}
	trafficBackends = [2]netip.Addr{b1v4, b1v6}
)

// trafficLab is the three namespaces; the balancer's interfaces are cli0 and srv0.
type trafficLab struct {
	client, lb, backend netns.NsHandle
}

// newTrafficLab builds the namespaces, gone when the test ends.
func newTrafficLab(t *testing.T) *trafficLab {
	if os.Geteuid() != 0 {
		testutil.Missing(t, "needs root: creates network namespaces")
	}
	l := &trafficLab{}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic(err) // never leave the thread in a test namespace
		}
		orig.Close()
	}()
	for _, ns := range []*netns.NsHandle{&l.client, &l.backend, &l.lb} {
		if *ns, err = netns.New(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ns.Close() })
		sysctls(t, map[string]string{"ipv6/conf/all/accept_dad": "0", "ipv6/conf/default/accept_dad": "0"})
	}
	// in the balancer's namespace, the last one created; replies of dsr flows come from VIPs it
	// has no route to
	sysctls(t, map[string]string{"ipv4/conf/all/forwarding": "1", "ipv6/conf/all/forwarding": "1", "ipv4/conf/all/rp_filter": "0", "ipv4/conf/default/rp_filter": "0"})
	trafficVeth(t, "cli0", "10.0.1.1/24", "fd00:1::1/64", l.client, "10.0.1.10/24", "fd00:1::10/64")
	trafficVeth(t, "srv0", "10.0.2.1/24", "fd00:2::1/64", l.backend, "10.0.2.11/24", "fd00:2::11/64")
	for _, side := range []struct {
		ns         netns.NsHandle
		via4, via6 string
		local      []string
	}{
		{l.client, "10.0.1.1", "fd00:1::1", nil},
		{l.backend, "10.0.2.1", "fd00:2::1", []string{"10.0.9.3/32", "fd00:9::3/128"}},
	} {
		if err := netns.Set(side.ns); err != nil {
			t.Fatal(err)
		}
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetUp(lo); err != nil {
			t.Fatal(err)
		}
		for _, a := range side.local {
			addr, _ := netlink.ParseAddr(a)
			addr.Flags = unix.IFA_F_NODAD
			if err := netlink.AddrAdd(lo, addr); err != nil {
				t.Fatal(err)
			}
		}
		for _, gw := range []string{side.via4, side.via6} {
			if err := netlink.RouteAdd(&netlink.Route{Gw: net.ParseIP(gw)}); err != nil {
				t.Fatalf("default route via %s: %v", gw, err)
			}
		}
	}
	return l
}

// sysctls sets /proc/sys/net values in the current namespace.
func sysctls(t *testing.T, values map[string]string) {
	for k, v := range values {
		if err := os.WriteFile(filepath.Join("/proc/sys/net", k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// trafficVeth adds veth name, up with addresses here, whose peer (named name too) goes up into
// peerNS with its own addresses.
func trafficVeth(t *testing.T, name, addr4, addr6 string, peerNS netns.NsHandle, peer4, peer6 string) {
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatal(err)
	}
	peer, err := netlink.LinkByName(name + "p")
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetNsFd(peer, int(peerNS)); err != nil {
		t.Fatal(err)
	}
	trafficLinkUp(t, name, addr4, addr6)
	here, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer here.Close()
	if err := netns.Set(peerNS); err != nil {
		t.Fatal(err)
	}
	trafficLinkUp(t, name+"p", peer4, peer6)
	if err := netns.Set(here); err != nil {
		t.Fatal(err)
	}
}

// trafficLinkUp brings link name up with addresses and returns its index.
func trafficLinkUp(t testing.TB, name string, addrs ...string) int {
	link, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		addr, _ := netlink.ParseAddr(a)
		addr.Flags = unix.IFA_F_NODAD
		if err := netlink.AddrAdd(link, addr); err != nil {
			t.Fatal(err)
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		t.Fatal(err)
	}
	return link.Attrs().Index
}

// balance loads the program, fills its maps with the lab's services and attaches it to the
// balancer's interfaces on hook; it returns the program's objects, for more services.
func (l *trafficLab) balance(t *testing.T, h hook) *sluiceObjects {
	objs := loadUnpinned(t, testMapSizes)
	for i, b := range trafficBackends {
		for j, port := range []uint16{8080, 0} { // ids 1, 2: IPv4; 3, 4: IPv6; the odd ones for dsr
			w, family := wireAddr(b)
			if err := objs.Backends.Put(uint32(2*i+j+1), sluiceBackend{Addr: w, Port: wirePort(port), Family: family, Flags: sluiceBackendFlagsBACKEND_VALID}); err != nil {
				t.Fatal(err)
			}
		}
	}
	id := uint32(0)
	for mode, vips := range trafficVIPs {
		for i, vip := range vips {
			backend := uint32(2*i + 1)
			if mode == "dsr" {
				backend++
			}
			for _, proto := range []uint8{protoTCP, protoUDP} {
				id++
				if err := objs.Maglev.Put(id, backend); err != nil {
					t.Fatal(err)
				}
				svc := sluiceService{Id: id, RingOffset: id, RingSize: 1, Mode: wireModes[config.Mode(mode)]}
				if err := objs.Vips.Put(vipKeyOf(vip, 80, proto), svc); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	g := sluiceGlobals{Snat6: mustAddr("fd00:2::1").As16(), PortLow: 40000, PortHigh: 40999}
	copy(g.Snat4[:], mustAddr("10.0.2.1").AsSlice())
	if err := objs.Config.Put(uint32(0), g); err != nil {
		t.Fatal(err)
	}
	netnstest.In(t, l.lb, func() {
		for _, name := range []string{"cli0", "srv0"} {
			ifc, err := net.InterfaceByName(name)
			if err != nil {
				t.Fatal(err)
			}
			var lk link.Link
			if h == hookXDP { // with its MAC recorded, as Apply does
				if err := objs.IfMacs.Put(uint32(ifc.Index), sluiceIfMac{Addr: [6]byte(ifc.HardwareAddr)}); err != nil {
					t.Fatal(err)
				}
				lk, err = link.AttachXDP(link.XDPOptions{Program: objs.SluiceXdp, Interface: ifc.Index, Flags: link.XDPDriverMode})
			} else {
				lk, err = link.AttachTCX(link.TCXOptions{Program: objs.SluiceTc, Interface: ifc.Index, Attach: ebpf.AttachTCXIngress})
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { lk.Close() })
		}
	})
	if h == hookXDP {
		l.xdpPeers(t)
	}
	return objs
}

// xdpPeers attaches an XDP program that passes everything to the veth peers of the balancer's
// interfaces: a veth only takes XDP_REDIRECTed frames when its peer runs XDP (or GRO).
func (l *trafficLab) xdpPeers(t *testing.T) {
	pass, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "GPL", Instructions: asm.Instructions{
		asm.Mov.Imm(asm.R0, 2), // XDP_PASS
		asm.Return(),
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pass.Close() })
	for ns, name := range map[netns.NsHandle]string{l.client: "cli0p", l.backend: "srv0p"} {
		netnstest.In(t, ns, func() {
			ifc, err := net.InterfaceByName(name)
			if err != nil {
				t.Fatal(err)
			}
			lk, err := link.AttachXDP(link.XDPOptions{Program: pass, Interface: ifc.Index, Flags: link.XDPDriverMode})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { lk.Close() })
		})
	}
}

// serve starts the backend's echo servers, on the dsr VIPs, port 8080 and the extra addresses,
// stopped when the test ends.
func (l *trafficLab) serve(t *testing.T, extra ...string) {
	addrs := extra
	for _, vips := range [][2]netip.Addr{trafficVIPs["dsr"]} {
		for _, vip := range vips {
			addrs = append(addrs, netip.AddrPortFrom(vip, 80).String())
		}
	}
	netnstest.In(t, l.backend, func() {
		for _, a := range append(addrs, ":8080") {
			ln, err := net.Listen("tcp", a)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					go func() {
						defer c.Close()
						_, _ = io.Copy(c, c)
					}()
				}
			}()
			pc, err := net.ListenPacket("udp", a)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { pc.Close() })
			go func() {
				buf := make([]byte, 65536)
				for {
					n, from, err := pc.ReadFrom(buf)
					if err != nil {
						return
					}
					_, _ = pc.WriteTo(buf[:n], from)
				}
			}()
		}
	})
}

func TestTrafficThroughTheBalancer(t *testing.T) {
	for _, c := range []struct {
		hook     hook
		offload  bool
		scenario string
	}{
		{hookTC, true, "tc, senders offloading checksums (CHECKSUM_PARTIAL)"},
		{hookTC, false, "tc, complete checksums"},
		{hookXDP, false, "xdp, complete checksums"}, // XDP cannot tell CHECKSUM_PARTIAL frames
	} {
		t.Run(c.scenario, func(t *testing.T) {
			l := newTrafficLab(t)
			if !c.offload {
				netnstest.In(t, l.client, func() { setTxChecksumming(t, "cli0p", false) })
				netnstest.In(t, l.backend, func() { setTxChecksumming(t, "srv0p", false) })
			}
			l.serve(t)
			l.balance(t, c.hook)
			for _, mode := range []string{"nat", "fullnat", "dsr"} {
				for _, vip := range trafficVIPs[mode] {
					t.Run(fmt.Sprintf("%s/%v/tcp", mode, vip), func(t *testing.T) { l.echoTCP(t, netip.AddrPortFrom(vip, 80)) })
					t.Run(fmt.Sprintf("%s/%v/udp", mode, vip), func(t *testing.T) { l.echoUDP(t, netip.AddrPortFrom(vip, 80)) })
				}
			}
		})
	}
}

// setTxChecksumming turns a device's transmit checksum offload on or off (ETHTOOL_STXCSUM).
func setTxChecksumming(t *testing.T, name string, on bool) {
	if err := ethtool.Set(name, unix.ETHTOOL_STXCSUM, on); err != nil {
		t.Fatal(err)
	}
}

// echoTCP sends a megabyte through a TCP connection from the client to vip and reads it back.
func (l *trafficLab) echoTCP(t *testing.T, vip netip.AddrPort) {
	var c net.Conn
	var err error
	netnstest.In(t, l.client, func() { c, err = net.DialTimeout("tcp", vip.String(), 15*time.Second) })
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	sent := make([]byte, 1<<20)
	_, _ = rand.Read(sent)
	go func() { _, _ = c.Write(sent) }()
	got := make([]byte, len(sent))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, sent) {
		t.Fatal("the echo differs from what was sent")
	}
}

// echoUDP sends a datagram from the client to vip and reads the reply.
func (l *trafficLab) echoUDP(t *testing.T, vip netip.AddrPort) {
	var c net.Conn
	var err error
	netnstest.In(t, l.client, func() { c, err = net.Dial("udp", vip.String()) })
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sent := []byte("sluice " + vip.String())
	got := make([]byte, 100)
	// the first datagrams may be spent on neighbour resolution, and a loaded machine is slow
	for try := 0; try < 10; try++ {
		if _, err := c.Write(sent); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, err := c.Read(got)
		if err == nil {
			if !bytes.Equal(got[:n], sent) {
				t.Fatalf("reply %q, want %q", got[:n], sent)
			}
			return
		}
	}
	t.Fatal("no reply")
}
