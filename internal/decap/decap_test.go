package decap

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/netnstest"
	"github.com/sluicelb/sluice/internal/testutil"
)

// The decapsulation's fixture world: this host (10.0.3.11, fd00:3::11, and the AnyIP VIP ranges
// 10.0.9.0/24 and fd00:9::/64) and a balancer (10.0.2.1, fd00:2::1) sending tunnel packets from a client.
var (
	host4, host6   = netip.MustParseAddr("10.0.3.11"), netip.MustParseAddr("fd00:3::11")
	vip4, vip6     = netip.MustParseAddr("10.0.9.7"), netip.MustParseAddr("fd00:9::7")
	lb4, lb6       = netip.MustParseAddr("10.0.2.1"), netip.MustParseAddr("fd00:2::1")
	cli4, cli6     = netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("2001:db8::7")
	other4, other6 = netip.MustParseAddr("10.0.3.12"), netip.MustParseAddr("fd00:3::12")
	macA, macB     = net.HardwareAddr{2, 0, 0, 0, 3, 1}, net.HardwareAddr{2, 0, 0, 0, 3, 0xb}
)

const testGUEPort = 6080

// loadTest loads the program with fresh unpinned maps holding the fixture world, closed when the
// test ends.
func loadTest(t *testing.T) *decapObjects {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.Missing(t, "needs root: loads BPF programs")
	}
	spec, err := loadDecap()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range spec.Maps {
		m.Pinning = ebpf.PinNone
	}
	var objs decapObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		t.Fatalf("loading: %+v", err)
	}
	t.Cleanup(func() { objs.Close() })
	for _, p := range []netip.Prefix{netip.PrefixFrom(host4, 32), netip.PrefixFrom(host6, 128), netip.MustParsePrefix("10.0.9.0/24"), netip.MustParsePrefix("fd00:9::/64")} {
		if err := objs.DecapLocal.Put(localKeyOf(p), uint8(1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := objs.DecapConfig.Put(uint32(0), decapDecapSettings{GuePort: wirePort(testGUEPort)}); err != nil {
		t.Fatal(err)
	}
	return &objs
}

// inner is a client's TCP segment to vip:80.
func inner(client, vip netip.Addr) []byte {
	tcp := &layers.TCP{SrcPort: 40001, DstPort: 80, ACK: true, Seq: 1000, Ack: 2000, Window: 64240}
	var l []gopacket.SerializableLayer
	if client.Is4() {
		ip := &layers.IPv4{Version: 4, TTL: 61, Protocol: layers.IPProtocolTCP, SrcIP: client.AsSlice(), DstIP: vip.AsSlice()}
		_ = tcp.SetNetworkLayerForChecksum(ip)
		l = []gopacket.SerializableLayer{ip, tcp}
	} else {
		ip := &layers.IPv6{Version: 6, HopLimit: 61, NextHeader: layers.IPProtocolTCP, SrcIP: client.AsSlice(), DstIP: vip.AsSlice()}
		_ = tcp.SetNetworkLayerForChecksum(ip)
		l = []gopacket.SerializableLayer{ip, tcp}
	}
	return serialize(append(l, gopacket.Payload("GET / HTTP/1.0\r\n\r\n"))...)
}

// tunnel is payload (an IP packet, or anything) inside an outer header from src to dst: IP in IP
// of the outer family (IPv4 in IPv4, IPv6 in IPv6), or UDP to port when port is not 0.
func tunnel(src, dst netip.Addr, port uint16, payload []byte) []byte {
	proto := layers.IPProtocolIPv6
	if src.Is4() {
		proto = layers.IPProtocolIPv4
	}
	return tunnelAs(src, dst, proto, port, payload)
}

// tunnelAs is tunnel with the outer protocol (next header) of IP in IP: IPv4 (4) or IPv6 (41).
func tunnelAs(src, dst netip.Addr, proto layers.IPProtocol, port uint16, payload []byte) []byte {
	var l []gopacket.SerializableLayer
	udp := &layers.UDP{SrcPort: 40000, DstPort: layers.UDPPort(port)}
	if src.Is4() {
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: proto, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
		if port != 0 {
			ip.Protocol = layers.IPProtocolUDP
			_ = udp.SetNetworkLayerForChecksum(ip)
		}
		l = []gopacket.SerializableLayer{ip}
	} else {
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: proto, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
		if port != 0 {
			ip.NextHeader = layers.IPProtocolUDP
			_ = udp.SetNetworkLayerForChecksum(ip)
		}
		l = []gopacket.SerializableLayer{ip}
	}
	if port != 0 {
		l = append(l, udp)
	}
	return ether(src, serialize(append(l, gopacket.Payload(payload))...))
}

// ether is an IP packet of a's family in an Ethernet frame.
func ether(a netip.Addr, ip []byte) []byte {
	typ := uint16(layers.EthernetTypeIPv6)
	if a.Is4() {
		typ = uint16(layers.EthernetTypeIPv4)
	}
	h := append(append(bytes.Clone(macB), macA...), 0, 0)
	binary.BigEndian.PutUint16(h[12:], typ)
	return append(h, ip...)
}

// serialize builds layers with lengths and checksums computed.
func serialize(l ...gopacket.SerializableLayer) []byte {
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, l...); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

// run runs the program on a frame; it returns its return code and the frame it left.
func run(t *testing.T, objs *decapObjects, frame []byte) (uint32, []byte) {
	t.Helper()
	out := make([]byte, len(frame)+64)
	opts := ebpf.RunOptions{Data: frame, DataOut: out}
	ret, err := objs.SluiceDecap.Run(&opts)
	if err != nil {
		t.Fatal(err)
	}
	return ret, opts.DataOut
}

// counts reads the counters.
func counts(t *testing.T, objs *decapObjects) Counts {
	t.Helper()
	var per []decapDecapCounts
	if err := objs.DecapStats.Lookup(uint32(0), &per); err != nil {
		t.Fatal(err)
	}
	return sumCounts(per)
}

const (
	tcOK   = 0 // TC_ACT_OK
	tcShot = 2 // TC_ACT_SHOT
)

// decapCase is a decapsulation fixture: a frame in, the return code, the frame out (nil:
// untouched) and the counters after.
type decapCase struct {
	name string
	in   []byte
	ret  uint32
	out  []byte
	want Counts
}

// runCases runs decapsulation fixtures, each from zeroed counters.
func runCases(t *testing.T, objs *decapObjects, cases []decapCase) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := objs.DecapStats.Put(uint32(0), make([]decapDecapCounts, ebpf.MustPossibleCPU())); err != nil {
				t.Fatal(err)
			}
			ret, out := run(t, objs, c.in)
			if ret != c.ret {
				t.Fatalf("return code %d, want %d", ret, c.ret)
			}
			want := c.out
			if want == nil {
				want = c.in
			}
			if ret == tcOK && !bytes.Equal(out, want) {
				t.Errorf("frame left:\n%x\nwant:\n%x", out, want)
			}
			if got := counts(t, objs); got != c.want {
				t.Errorf("counters %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestDecapFixtures runs tunnel packets, good and bad, through the program: the good ones leave
// as the inner packet in the same Ethernet header, the others untouched (passed) or dropped, each
// counted.
func TestDecapFixtures(t *testing.T) {
	objs := loadTest(t)
	in4, in6 := inner(cli4, vip4), inner(cli6, vip6)
	gueV0 := append([]byte{0, 4, 0, 0}, in4...)
	truncated := tunnel(lb4, host4, 0, in4[:30])
	binary.BigEndian.PutUint16(truncated[14+20+2:], uint16(len(in4))) // the inner claims more than there is
	plainIP := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: lb4.AsSlice(), DstIP: host4.AsSlice()}
	plainUDP := &layers.UDP{SrcPort: 5353, DstPort: 53}
	_ = plainUDP.SetNetworkLayerForChecksum(plainIP)
	plain := ether(lb4, serialize(plainIP, plainUDP, gopacket.Payload("query")))
	runCases(t, objs, []decapCase{
		{"ipip: IPv4 in IPv4 to the host", tunnel(lb4, host4, 0, in4), tcOK, ether(cli4, in4), Counts{IPIP: 1}},
		{"ipip: IPv6 in IPv6", tunnel(lb6, host6, 0, in6), tcOK, ether(cli6, in6), Counts{IPIP: 1}},
		{"ipip: outer destination a VIP of the host", tunnel(lb4, vip4, 0, in4), tcOK, ether(cli4, in4), Counts{IPIP: 1}},
		{"gue: variant 1 over IPv4", tunnel(lb4, host4, testGUEPort, in4), tcOK, ether(cli4, in4), Counts{GUE: 1}},
		{"gue: variant 1 over IPv6", tunnel(lb6, host6, testGUEPort, in6), tcOK, ether(cli6, in6), Counts{GUE: 1}},
		{"gue: variant 0 without options", tunnel(lb4, host4, testGUEPort, gueV0), tcOK, ether(cli4, in4), Counts{GUE: 1}},
		{"UDP to another port passes untouched", tunnel(lb4, host4, testGUEPort+1, in4), tcOK, nil, Counts{}},
		{"plain traffic passes untouched", plain, tcOK, nil, Counts{}},
		{"a tunnel to another host passes untouched (transit)", tunnel(lb4, other4, 0, in4), tcOK, nil, Counts{}},
		{"an inner destination not the host's is dropped", tunnel(lb4, host4, 0, inner(cli4, other4)), tcShot, nil, Counts{Foreign: 1}},
		{"an IPv6 inner destination not the host's is dropped", tunnel(lb6, host6, testGUEPort, inner(cli6, other6)), tcShot, nil, Counts{Foreign: 1}},
		{"a truncated inner packet is dropped", truncated, tcShot, nil, Counts{Malformed: 1}},
		{"an inner packet of another family is dropped", tunnel(lb4, host4, 0, in6), tcShot, nil, Counts{Malformed: 1}},
		{"GUE with a bad version is dropped", tunnel(lb4, host4, testGUEPort, append([]byte{0x80, 4, 0, 0}, in4...)), tcShot, nil, Counts{Malformed: 1}},
		{"GUE with options is dropped", tunnel(lb4, host4, testGUEPort, append([]byte{0x01, 4, 0, 0}, in4...)), tcShot, nil, Counts{Malformed: 1}},
		{"GUE too short for its header is dropped", tunnel(lb4, host4, testGUEPort, nil), tcShot, nil, Counts{Malformed: 1}},
		{"a lone outer IPIP header is dropped", tunnel(lb4, host4, 0, nil), tcShot, nil, Counts{Malformed: 1}},
	})
}

// TestDecapMemoFollowsTheEpoch: the program remembers per CPU the destinations it last found
// local, and forgets them when decap_epoch moves (as Attach moves it after changing decap_local),
// so a range removed from the host stops taking tunnel packets at once.
func TestDecapMemoFollowsTheEpoch(t *testing.T) {
	objs := loadTest(t)
	runtime.LockOSThread() // the memo is per CPU: every run on one
	defer runtime.UnlockOSThread()
	var was, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &was); err != nil {
		t.Fatal(err)
	}
	one.Set(0)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := unix.SchedSetaffinity(0, &was); err != nil {
			t.Error(err)
		}
	}()
	in := tunnel(lb4, host4, 0, inner(cli4, vip4))
	if ret, out := run(t, objs, in); ret != tcOK || !bytes.Equal(out, ether(cli4, inner(cli4, vip4))) {
		t.Fatalf("a packet to the VIP range: %d, want it decapsulated", ret)
	}
	if err := objs.DecapLocal.Delete(localKeyOf(netip.MustParsePrefix("10.0.9.0/24"))); err != nil {
		t.Fatal(err)
	}
	if ret, _ := run(t, objs, in); ret != tcOK {
		t.Fatalf("before the epoch moves: %d, want the memo's answer (decapsulated)", ret)
	}
	if err := nextEpoch(objs.DecapEpoch); err != nil {
		t.Fatal(err)
	}
	if ret, _ := run(t, objs, in); ret != tcShot {
		t.Errorf("after the epoch moved: %d, want it dropped (the VIP range is no longer the host's)", ret)
	}
}

// enterWithVeth enters a new network namespace holding the veth pair dc0-dc1 and returns both
// ends, down and without addresses.
func enterWithVeth(t *testing.T) (dc0, dc1 netlink.Link) {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.Missing(t, "needs root: attaches BPF programs in a network namespace")
	}
	netnstest.EnterNew(t)
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "dc0"}, PeerName: "dc1"}); err != nil {
		t.Fatal(err)
	}
	dc0, err := netlink.LinkByName("dc0")
	if err == nil {
		dc1, err = netlink.LinkByName("dc1")
	}
	if err != nil {
		t.Fatal(err)
	}
	return dc0, dc1
}

// TestAttachDetachStatus attaches to a veth in a network namespace, reads the status, attaches
// again (in place), and detaches: the pins go with the last link.
func TestAttachDetachStatus(t *testing.T) {
	l, _ := enterWithVeth(t)
	addr, _ := netlink.ParseAddr("10.0.3.11/24")
	if err := netlink.AddrAdd(l, addr); err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
	lo, err := netlink.LinkByName("lo")
	if err == nil {
		err = netlink.LinkSetUp(lo)
	}
	if err == nil { // an AnyIP range, as the lab's backends hold their VIPs
		err = netlink.RouteAdd(&netlink.Route{LinkIndex: lo.Attrs().Index, Dst: &net.IPNet{IP: net.IP{10, 0, 9, 0}, Mask: net.CIDRMask(24, 32)},
			Type: unix.RTN_LOCAL, Table: unix.RT_TABLE_LOCAL, Scope: netlink.SCOPE_HOST})
	}
	if err == nil { // an IPv6 VIP added just before the attach: its local route may come later
		v6, _ := netlink.ParseAddr("fd00:3::11/128")
		v6.Flags = unix.IFA_F_NODAD
		err = netlink.AddrAdd(lo, v6)
	}
	if err != nil {
		t.Fatal(err)
	}
	pin := privateBPFFS(t)
	o := Options{PinPath: pin, Interface: "dc0", GUEPort: 6080}
	if err := Attach(o); err != nil {
		t.Fatal(err)
	}
	local, err := ebpf.LoadPinnedMap(filepath.Join(pin, decapMapDecapLocal), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"10.0.3.11", "10.0.9.5", "fd00:3::11"} {
		var v uint8
		addr := netip.MustParseAddr(a)
		if err := local.Lookup(localKeyOf(netip.PrefixFrom(addr, addr.BitLen())), &v); err != nil {
			t.Errorf("%s is not local to the program: %v", a, err)
		}
	}
	local.Close()
	if err := Attach(o); err != nil {
		t.Fatalf("attaching again: %v", err)
	}
	st, err := ReadStatus(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Interfaces) != 1 || st.Interfaces[0] != "dc0" || st.GUEPort != 6080 || st.LocalPrefixes < 1 {
		t.Errorf("status %+v, want dc0, port 6080, the host's addresses", st)
	}
	if err := Detach(o); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(pin); !os.IsNotExist(err) {
		t.Errorf("the pin directory is still there after the last detach (%v)", err)
	}
	if err := Detach(o); err == nil {
		t.Error("detaching twice did not fail")
	}
	if st, err := ReadStatus(o); err != nil || len(st.Interfaces) != 0 {
		t.Errorf("status after detach %+v (%v), want nothing attached", st, err)
	}
}

// privateBPFFS mounts a BPF filesystem of the test's own and returns a pin path in it.
func privateBPFFS(t *testing.T) string { return testutil.PrivateBPFFS(t, "decap") }

// upVeth adds the veth pair dc0/dc1 to the thread's namespace, with addr on dc0 up, and returns
// dc0's index.
func upVeth(t *testing.T, addr string) int {
	t.Helper()
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "dc0"}, PeerName: "dc1"}); err != nil {
		t.Fatal(err)
	}
	l, err := netlink.LinkByName("dc0")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := netlink.ParseAddr(addr)
	if err := netlink.AddrAdd(l, a); err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
	return l.Attrs().Index
}

// TestAttachRefusesAnotherNamespacesPins attaches in two namespaces, each with its dc0 (most
// often of the same index), under one pin path: the second attach is refused and leaves the
// first's program and addresses as they were; under a pin path of its own it attaches.
func TestAttachRefusesAnotherNamespacesPins(t *testing.T) {
	if os.Geteuid() != 0 {
		testutil.Missing(t, "needs root: attaches BPF programs in network namespaces")
	}
	pin := privateBPFFS(t)
	o := Options{PinPath: pin, Interface: "dc0"}
	first, second := netnstest.New(t), netnstest.New(t)
	netnstest.In(t, first, func() {
		upVeth(t, "10.0.3.11/24")
		if err := Attach(o); err != nil {
			t.Fatal(err)
		}
	})
	netnstest.In(t, second, func() {
		upVeth(t, "10.0.4.11/24")
		err := Attach(o)
		if err == nil || !strings.Contains(err.Error(), "another namespace") {
			t.Errorf("attaching under another namespace's pin path: %v, want a refusal naming it", err)
		}
		own := Options{PinPath: pin + "-second", Interface: "dc0"}
		if err := Attach(own); err != nil {
			t.Errorf("attaching under a pin path of its own: %v", err)
		} else if err := Detach(own); err != nil {
			t.Error(err)
		}
	})
	local, err := ebpf.LoadPinnedMap(filepath.Join(pin, decapMapDecapLocal), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	for a, want := range map[string]bool{"10.0.3.11": true, "10.0.4.11": false} {
		var v uint8
		err := local.Lookup(localKeyOf(netip.PrefixFrom(netip.MustParseAddr(a), 32)), &v)
		if (err == nil) != want {
			t.Errorf("%s in the first namespace's decap_local: %v, want %v", a, err == nil, want)
		}
	}
	netnstest.In(t, first, func() {
		st, err := ReadStatus(o)
		if err != nil || len(st.Interfaces) != 1 {
			t.Errorf("the first namespace's status %+v (%v), want dc0 still attached", st, err)
		}
		if err := Detach(o); err != nil {
			t.Error(err)
		}
	})
}
