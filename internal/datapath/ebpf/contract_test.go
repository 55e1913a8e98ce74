package ebpf

import (
	"bytes"
	"net"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// segment builds an Ethernet/IPv4 TCP segment from client to vip: a SYN, or an ACK of an
// established connection. It is addressed to the MAC of lo, where BPF_PROG_TEST_RUN receives it:
// a frame for another host's MAC is left to the stack.
func segment(t *testing.T, client, vip netip.AddrPort, syn bool) []byte {
	t.Helper()
	return segmentWith(t, client, vip, layers.TCP{SYN: syn, ACK: !syn})
}

// segmentWith is segment with the flags of flags (IPv4 or IPv6, by the addresses).
func segmentWith(t *testing.T, client, vip netip.AddrPort, flags layers.TCP) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: make(net.HardwareAddr, 6), EthernetType: layers.EthernetTypeIPv4}
	var ip interface {
		gopacket.NetworkLayer
		gopacket.SerializableLayer
	}
	if client.Addr().Is4() {
		ip = &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: client.Addr().AsSlice(), DstIP: vip.Addr().AsSlice()}
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip = &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolTCP, SrcIP: client.Addr().AsSlice(), DstIP: vip.Addr().AsSlice()}
	}
	tcp := flags
	tcp.SrcPort, tcp.DstPort, tcp.Window = layers.TCPPort(client.Port()), layers.TCPPort(vip.Port()), 64240
	if err := tcp.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatal(err)
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, &tcp); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// destination runs the loaded program (BPF_PROG_TEST_RUN) on a packet and returns where the
// rewritten packet goes.
func destination(t *testing.T, d *Datapath, packet []byte) netip.AddrPort {
	t.Helper()
	out := make([]byte, 1500)
	if _, err := d.prog.Run(&ebpf.RunOptions{Data: packet, DataOut: out}); err != nil {
		t.Fatal(err)
	}
	pkt := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
	tcp, _ := pkt.Layer(layers.LayerTypeTCP).(*layers.TCP)
	if pkt.NetworkLayer() == nil || tcp == nil {
		t.Fatalf("the program output %v", pkt)
	}
	addr, _ := netip.AddrFromSlice(pkt.NetworkLayer().NetworkFlow().Dst().Raw())
	return netip.AddrPortFrom(addr.Unmap(), uint16(tcp.DstPort))
}

// TestProgramReadsWhatApplyWrote runs the loaded program (BPF_PROG_TEST_RUN) on a SYN to a VIP
// that Apply programmed: the program must find the service, pick a backend of its ring and
// record the flow under the ids Apply gave, rewriting the packet towards that backend. It checks
// the contract between the loader and the program (layouts, byte orders, ids, rings), not the
// program's forwarding, which its own fixture tests cover.
func TestProgramReadsWhatApplyWrote(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	p := planFromYAML(t, twoServices)
	r.apply(d, p)
	ids := idsOf(t, d)
	backends := map[uint32]netip.AddrPort{
		ids.of(t, "web/10.91.2.11:8080"): netip.MustParseAddrPort("10.91.2.11:8080"),
		ids.of(t, "web/10.91.2.12:8080"): netip.MustParseAddrPort("10.91.2.12:8080"),
	}
	client, vip := netip.MustParseAddrPort("10.91.1.7:40007"), netip.MustParseAddrPort("10.91.9.100:80")
	to := destination(t, d, segment(t, client, vip, true))
	var f sluiceFlow
	if err := d.maps.Flows.Lookup(flowKeyOf(client, vip, unix.IPPROTO_TCP), &f); err != nil {
		t.Fatalf("the program recorded no flow: %v", err)
	}
	if b, ok := backends[f.BackendId]; !ok || b != to || f.ServiceId != ids.of(t, "web") {
		t.Fatalf("flow %+v sent to %s: want service %d and a backend of %v", f, to, ids.of(t, "web"), backends)
	}
	st, err := d.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range st[0].Backends {
		if b.Address == to.Addr().String() && (b.Flows != 1 || b.ActiveFlows != 1 || b.Packets == nil || *b.Packets != 1) {
			t.Errorf("backend %s: %+v, want 1 flow, 1 active flow and 1 packet", b.Address, b)
		}
	}
}

// TestEstablishedFlowKeepsItsRemovedBackend balances a connection, removes its backend from the
// plan and sends the connection's next segment: it still goes to the removed (retired) backend,
// as conntrack keeps it under the nft datapath. Once the flow is idle and a resync freed the
// backend, the connection's next segment is balanced anew.
func TestEstablishedFlowKeepsItsRemovedBackend(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	r.apply(d, planFromYAML(t, oneService))
	client, vip := netip.MustParseAddrPort("10.91.1.7:40007"), netip.MustParseAddrPort("10.91.9.100:80")
	first := destination(t, d, segment(t, client, vip, true))
	left := netip.MustParseAddrPort("10.91.2.11:80")
	if first == left {
		left = netip.MustParseAddrPort("10.91.2.12:80")
	}
	without := planFromYAML(t, "services:\n  - {name: web, vip: 10.91.9.100, port: 80, backends: [{address: "+left.Addr().String()+"}]}\n")
	r.apply(d, without)
	if got := destination(t, d, segment(t, client, vip, false)); got != first {
		t.Fatalf("the established connection went to %s after its backend %s was removed", got, first)
	}
	ids := idsOf(t, d)
	idle := sluiceFlow{ServiceId: ids.of(t, "web"), BackendId: ids.of(t, "web/"+first.Addr().String()), LastSeen: idleLastSeen(t)}
	if err := d.maps.Flows.Put(flowKeyOf(client, vip, unix.IPPROTO_TCP), idle); err != nil {
		t.Fatal(err)
	}
	d.Resync()
	r.apply(d, without)
	if got := destination(t, d, segment(t, client, vip, false)); got != left {
		t.Errorf("after the backend was freed, the connection went to %s, want %s", got, left)
	}
}

// attachModes are the attach modes by hook.
var attachModes = map[hook]AttachMode{hookTC: AttachTC, hookXDP: AttachXDP}

// TestFrameForAnotherHostPasses: a SYN to a VIP in a frame for another host's MAC (a switch
// flooding unknown unicast once the node holding that MAC is gone) passes to the stack, which
// drops it, unbalanced and unrecorded: balancing it would duplicate another balancer's packets.
// tc reads the frame's packet type, XDP compares it with the MAC Apply recorded for the
// interface. The same SYN to the interface's own MAC is balanced.
func TestFrameForAnotherHostPasses(t *testing.T) {
	for _, h := range []hook{hookTC, hookXDP} {
		t.Run(h.String(), func(t *testing.T) {
			r := newRig(t)
			d := r.datapath(Options{Attach: attachModes[h]})
			r.apply(d, planFromYAML(t, oneService))
			veth0, err := netlink.LinkByName("veth0")
			if err != nil {
				t.Fatal(err)
			}
			client, vip := netip.MustParseAddrPort("10.91.1.7:40007"), netip.MustParseAddrPort("10.91.9.100:80")
			for _, to := range []net.HardwareAddr{{2, 0, 0, 0, 0, 2}, veth0.Attrs().HardwareAddr} {
				own := bytes.Equal(to, veth0.Attrs().HardwareAddr)
				frame := segment(t, client, vip, true)
				copy(frame, to)
				opts := ebpf.RunOptions{Data: frame, DataOut: make([]byte, 1500), Context: h.runContext(len(frame), uint32(veth0.Attrs().Index))}
				ret, err := d.prog.Run(&opts)
				if err != nil {
					t.Fatal(err)
				}
				var f sluiceFlow
				recorded := d.maps.Flows.Lookup(flowKeyOf(client, vip, unix.IPPROTO_TCP), &f) == nil
				switch {
				case !own && (h.verdictOf(ret) != vPass || recorded || !bytes.Equal(opts.DataOut, frame)):
					t.Fatalf("a frame for %s: verdict %v, flow recorded %v, frame untouched %v; want it passed untouched, unrecorded", to, h.verdictOf(ret), recorded, bytes.Equal(opts.DataOut, frame))
				case own && !recorded:
					t.Fatalf("a frame for veth0's own MAC %s was not balanced (verdict %v)", to, h.verdictOf(ret))
				}
			}
		})
	}
}
