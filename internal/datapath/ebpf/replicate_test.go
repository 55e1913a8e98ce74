package ebpf

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath"
)

// Flow replication between two nodes: two Datapaths over pin paths of their own in one rig (node
// A attached to veth0, node B to veth1), running their programs under BPF_PROG_TEST_RUN.

// replVIP is the replicated service's listener.
var replVIP = netip.MustParseAddrPort("10.91.9.100:80")

// replService is the service both nodes run, in a mode, with lc (counted connections); weight0
// names a backend that takes no new flow on that node.
func replService(mode config.Mode, weight0 string) string {
	y := "  - name: web\n    vip: 10.91.9.100\n    port: 80\n    scheduler: lc\n    mode: " + string(mode) + "\n    backends:\n"
	for _, b := range []string{"10.91.2.11", "10.91.2.12", "10.91.2.13"} {
		y += "      - {address: " + b + ", port: 8080"
		if b == weight0 {
			y += ", weight: 0"
		}
		y += "}\n"
	}
	return y
}

// nodeB is the rig's second node: a Datapath over a BPF filesystem of its own, attached to veth1,
// which gets 10.91.1.1/24 so that the replies it translates route to the clients.
func (r *rig) nodeB() *Datapath {
	r.t.Helper()
	veth1, err := netlink.LinkByName("veth1")
	if err != nil {
		r.t.Fatal(err)
	}
	addr, _ := netlink.ParseAddr("10.91.1.1/24")
	if err := netlink.AddrAdd(veth1, addr); err != nil {
		r.t.Fatal(err)
	}
	d, err := New(slog.New(slog.NewTextHandler(io.Discard, nil)), Options{PinPath: privatePinPath(r.t), Interfaces: []string{"veth1"}})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { d.Close() })
	return d
}

// watchFlows starts WatchFlows on d, sending every flow it emits to the channel returned, until the
// test ends.
func watchFlows(t *testing.T, d *Datapath) (<-chan datapath.ReplicatedFlow, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	out := make(chan datapath.ReplicatedFlow, 4096)
	err := d.WatchFlows(ctx, func(batch []datapath.ReplicatedFlow) {
		for _, f := range batch {
			out <- f
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return out, cancel
}

// next waits for the next flow emitted for client (at most a generous 10 s: no timing is judged).
func next(t *testing.T, flows <-chan datapath.ReplicatedFlow, client netip.AddrPort) datapath.ReplicatedFlow {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case f := <-flows:
			if f.Client == client {
				return f
			}
		case <-deadline:
			t.Fatalf("no flow of %s emitted", client)
		}
	}
}

// forwarded runs d's program on a frame that it must not drop and returns the packet's source and
// destination as the program left them (rewritten, when it translated them). Without a context the
// run receives the frame on lo, from where the route lookup may leave the packet to the stack.
func forwarded(t *testing.T, d *Datapath, frame []byte) (src, dst netip.AddrPort) {
	t.Helper()
	return forwardedFrom(t, d, frame, "")
}

// forwardedFrom is forwarded for a frame received on interface in (addressed to its MAC), or
// without a context for "". Of a tunnelled packet it returns the outer addresses and the inner
// ports.
func forwardedFrom(t *testing.T, d *Datapath, frame []byte, in string) (src, dst netip.AddrPort) {
	t.Helper()
	out := make([]byte, len(frame)+256)
	opts := &ebpf.RunOptions{Data: frame, DataOut: out}
	if in != "" {
		ifc, err := net.InterfaceByName(in)
		if err != nil {
			t.Fatal(err)
		}
		frame = append([]byte(nil), frame...)
		copy(frame, ifc.HardwareAddr)
		opts.Data, opts.Context = frame, hookTC.runContext(len(frame), uint32(ifc.Index))
	}
	ret, err := d.prog.Run(opts)
	if err != nil {
		t.Fatal(err)
	}
	if hookTC.verdictOf(ret) == vDrop {
		t.Fatal("the packet was dropped")
	}
	pkt := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
	tcp, _ := pkt.Layer(layers.LayerTypeTCP).(*layers.TCP)
	if pkt.NetworkLayer() == nil || tcp == nil {
		t.Fatalf("the program output %v", pkt)
	}
	s, _ := netip.AddrFromSlice(pkt.NetworkLayer().NetworkFlow().Src().Raw())
	ds, _ := netip.AddrFromSlice(pkt.NetworkLayer().NetworkFlow().Dst().Raw())
	return netip.AddrPortFrom(s.Unmap(), uint16(tcp.SrcPort)), netip.AddrPortFrom(ds.Unmap(), uint16(tcp.DstPort))
}

// activeConns is the program's count of a backend's active flows on node d.
func activeConns(t *testing.T, d *Datapath, id uint32) uint64 {
	t.Helper()
	c, err := readCounts(d.maps, id)
	if err != nil {
		t.Fatal(err)
	}
	return c.active()
}

// flowEventsOn reads config's flow_events of a node.
func flowEventsOn(t *testing.T, d *Datapath) bool {
	t.Helper()
	var g sluiceGlobals
	if err := d.maps.Config.Lookup(uint32(0), &g); err != nil {
		t.Fatal(err)
	}
	return g.FlowEvents != 0
}

// TestFlowsMoveBetweenNodes: a SYN through node A's program makes a flow that WatchFlows emits;
// node B imports it and then forwards the flow's next segment (no SYN) to the same backend,
// translated the same way, although B itself would send no new flow there (weight 0 on B), and
// translates the backend's reply back to the client. B counts the flow for its backend (lc) and
// learns when it closes. Node B's ids differ from A's (another service comes first). A fullnat
// service with a fullnat_source (an address neither node holds: a pair's floating one) sends
// from it on both nodes.
func TestFlowsMoveBetweenNodes(t *testing.T) {
	for _, c := range []struct {
		name   string
		mode   config.Mode
		source string
	}{{"nat", config.ModeNAT, ""}, {"fullnat", config.ModeFullNAT, ""}, {"fullnat_source", config.ModeFullNAT, "10.91.2.250"}} {
		mode := c.mode
		service := func(weight0 string) string {
			y := replService(mode, weight0)
			if c.source != "" {
				y = strings.Replace(y, "    backends:\n", "    fullnat_source: "+c.source+"\n    backends:\n", 1)
			}
			return y
		}
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t)
			a, b := r.datapath(Options{}), r.nodeB()
			pa := planFromYAML(t, "datapath: ebpf\nservices:\n"+service(""))
			r.apply(a, pa)
			flows, _ := watchFlows(t, a)
			a.Resync() // an Apply that reads the maps back keeps the flow events on
			r.apply(a, pa)
			if !flowEventsOn(t, a) {
				t.Fatal("Apply turned the flow events off while WatchFlows runs")
			}
			client := netip.MustParseAddrPort("10.91.1.7:40007")
			natSrc, backend := forwarded(t, a, segment(t, client, replVIP, true))
			f := next(t, flows, client)
			if f.Protocol != config.ProtocolTCP || f.Listener != replVIP || f.Backend != backend || f.Closing || f.Idle > time.Minute {
				t.Fatalf("emitted %+v, want a flow of %s to %s", f, client, backend)
			}
			if mode == config.ModeFullNAT && f.NATSource != natSrc || mode == config.ModeNAT && f.NATSource.IsValid() {
				t.Fatalf("emitted NAT source %s, the program sent from %s", f.NATSource, natSrc)
			}
			if c.source != "" && natSrc.Addr().String() != c.source {
				t.Fatalf("node A sent the SYN from %s, not from the service's fullnat_source %s", natSrc, c.source)
			}

			other := "  - {name: other, vip: 10.91.9.200, port: 80, backends: [{address: 10.91.2.21}, {address: 10.91.2.22}]}\n"
			r.apply(b, planFromYAML(t, "datapath: ebpf\nservices:\n"+other+service(backend.Addr().String())))
			idB, idA := idsOf(t, b).of(t, "web/"+backend.String()), idsOf(t, a).of(t, "web/"+backend.String())
			if idB == idA {
				t.Fatalf("the backend has id %d on both nodes: the test would not show the translation", idA)
			}
			res, err := b.ImportFlows(context.Background(), []datapath.ReplicatedFlow{f})
			if err != nil || res.Imported != 1 {
				t.Fatalf("ImportFlows = %+v, %v", res, err)
			}
			if n := activeConns(t, b, idB); n != 1 {
				t.Errorf("node B counts %d active flows for the backend, want 1", n)
			}
			if src, dst := forwarded(t, b, segment(t, client, replVIP, false)); dst != backend || src != natSrc {
				t.Errorf("node B sent the flow's next segment from %s to %s, node A from %s to %s", src, dst, natSrc, backend)
			}
			reply := segment(t, backend, natSrc, false)
			if src, dst := forwarded(t, b, reply); src != replVIP || dst != client {
				t.Errorf("node B translated the backend's reply to %s -> %s, want %s -> %s", src, dst, replVIP, client)
			}
			// a flow B was not told of goes elsewhere: B gives its backend no new flow
			stranger := netip.MustParseAddrPort("10.91.1.8:40008")
			if _, dst := forwarded(t, b, segment(t, stranger, replVIP, false)); dst.Addr() == backend.Addr() {
				t.Errorf("node B sent a flow it was not told of to %s, which takes no new flows there", dst)
			}

			forwarded(t, a, segmentWith(t, client, replVIP, layers.TCP{FIN: true, ACK: true}))
			closing := next(t, flows, client)
			if !closing.Closing {
				t.Fatalf("emitted %+v after the client's FIN, want it closing", closing)
			}
			if res, err := b.ImportFlows(context.Background(), []datapath.ReplicatedFlow{closing}); err != nil || res.Imported != 1 {
				t.Fatalf("ImportFlows(closing) = %+v, %v", res, err)
			}
			var got sluiceFlow
			if err := b.maps.Flows.Lookup(flowKeyOf(client, replVIP, unix.IPPROTO_TCP), &got); err != nil || got.Flags&sluiceFlowFlagsFLOW_CLOSING == 0 {
				t.Errorf("node B's flow %+v (%v), want it closing", got, err)
			}
			if n := activeConns(t, b, idB); n != 0 {
				t.Errorf("node B counts %d active flows for the backend after the close, want 0", n)
			}
		})
	}
}

// TestWatchFlowsStopsTheEvents: without a watcher the program hands no flow to flow_events;
// once WatchFlows's context ends, it stops again.
func TestWatchFlowsStopsTheEvents(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	r.apply(d, planFromYAML(t, "datapath: ebpf\nservices:\n"+replService(config.ModeNAT, "")))
	ring, err := ringbuf.NewReader(d.maps.FlowEvents)
	if err != nil {
		t.Fatal(err)
	}
	forwarded(t, d, segment(t, netip.MustParseAddrPort("10.91.1.7:40007"), replVIP, true))
	if n := ring.AvailableBytes(); n != 0 || flowEventsOn(t, d) {
		t.Fatalf("with no watcher: %d bytes of events, flow events on %v", n, flowEventsOn(t, d))
	}
	ring.Close()

	flows, cancel := watchFlows(t, d)
	client := netip.MustParseAddrPort("10.91.1.8:40008")
	forwarded(t, d, segment(t, client, replVIP, true))
	next(t, flows, client)
	cancel()
	for deadline := time.Now().Add(10 * time.Second); flowEventsOn(t, d); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the flow events stayed on after the watcher's context ended")
		}
	}
	watchFlows(t, d) // and a watcher may start again
}

// TestImportSkipsWhatThisNodeCannotTake counts the flows a node cannot take by reason and
// changes nothing for them; a flow the node saw a packet of more recently keeps its own entry.
func TestImportSkipsWhatThisNodeCannotTake(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	r.apply(d, planFromYAML(t, "datapath: ebpf\nservices:\n"+replService(config.ModeFullNAT, "")+
		"  - {name: plain, vip: 10.91.9.101, port: 80, backends: [{address: 10.91.2.11, port: 8080}]}\n"))
	var g sluiceGlobals
	if err := d.maps.Config.Lookup(uint32(0), &g); err != nil {
		t.Fatal(err)
	}
	own := netip.AddrFrom4(g.Snat4)
	local := netip.MustParseAddrPort("10.91.1.9:40009")
	_, backend := forwarded(t, d, segment(t, local, replVIP, true))
	var before sluiceFlow
	if err := d.maps.Flows.Lookup(flowKeyOf(local, replVIP, unix.IPPROTO_TCP), &before); err != nil {
		t.Fatal(err)
	}
	b11 := netip.MustParseAddrPort("10.91.2.11:8080")
	flow := func(client string, edit func(*datapath.ReplicatedFlow)) datapath.ReplicatedFlow {
		f := datapath.ReplicatedFlow{
			Protocol: config.ProtocolTCP, Client: netip.MustParseAddrPort(client), Listener: replVIP, Backend: b11,
			NATSource: netip.AddrPortFrom(own, 20000), Idle: time.Second,
		}
		edit(&f)
		return f
	}
	flows := []datapath.ReplicatedFlow{
		flow("10.91.1.20:1", func(f *datapath.ReplicatedFlow) { f.Listener = netip.MustParseAddrPort("10.91.9.100:81") }),
		flow("10.91.1.21:1", func(f *datapath.ReplicatedFlow) { f.Protocol = config.ProtocolUDP }),
		flow("10.91.1.22:1", func(f *datapath.ReplicatedFlow) { f.Backend = netip.MustParseAddrPort("10.91.2.99:8080") }),
		flow("10.91.1.23:1", func(f *datapath.ReplicatedFlow) { f.Backend = netip.MustParseAddrPort("10.91.2.11:9090") }),
		flow("10.91.1.24:1", func(f *datapath.ReplicatedFlow) { f.NATSource = netip.MustParseAddrPort("[fd00::250]:20000") }),
		flow("10.91.1.25:1", func(f *datapath.ReplicatedFlow) { f.NATSource = netip.AddrPort{} }),
		flow("10.91.1.26:1", func(f *datapath.ReplicatedFlow) { f.NATSource = netip.AddrPortFrom(own, 5) }),
		flow("10.91.1.27:1", func(f *datapath.ReplicatedFlow) {
			f.Listener = netip.MustParseAddrPort("10.91.9.101:80") // nat: no source
		}),
		flow("10.91.1.28:1", func(f *datapath.ReplicatedFlow) { f.Backend = netip.MustParseAddrPort("[fd00::1]:8080") }),
		flow("10.91.1.29:1", func(f *datapath.ReplicatedFlow) { f.Protocol = "sctp" }),
		flow(local.String(), func(f *datapath.ReplicatedFlow) { f.Backend, f.Idle = backend, time.Minute }),
	}
	res, err := d.ImportFlows(context.Background(), flows)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"no such service": 2, "no such backend": 2, "another nat source": 4, "invalid": 2, "tracked here": 1}
	if res.Imported != 0 || len(res.Skipped) != len(want) {
		t.Fatalf("ImportFlows = %+v, want %v skipped", res, want)
	}
	for why, n := range want {
		if res.Skipped[why] != n {
			t.Errorf("skipped %q: %d, want %d", why, res.Skipped[why], n)
		}
	}
	n := 0
	err = readAll(d.maps.Flows, func(k sluiceFlowKey, f sluiceFlow) bool {
		n++
		if k == flowKeyOf(local, replVIP, unix.IPPROTO_TCP) && f != before {
			t.Errorf("the local flow became %+v, was %+v", f, before)
		}
		return true
	})
	if err != nil || n != 1 {
		t.Errorf("%d flows after the import (%v), want the local one alone", n, err)
	}
}

// TestImportedFlowReplacesAnOlderOne: a flow this node tracked longer ago than the peer saw it is
// the peer's: it takes the peer's backend, its old reply entry goes and the counts follow.
func TestImportedFlowReplacesAnOlderOne(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	r.apply(d, planFromYAML(t, "datapath: ebpf\nservices:\n"+replService(config.ModeNAT, "")))
	client := netip.MustParseAddrPort("10.91.1.7:40007")
	_, was := forwarded(t, d, segment(t, client, replVIP, true))
	key := flowKeyOf(client, replVIP, unix.IPPROTO_TCP)
	var f sluiceFlow
	if err := d.maps.Flows.Lookup(key, &f); err != nil {
		t.Fatal(err)
	}
	f.LastSeen = lastSeenAgo(monotonicNow(), 5*time.Second)
	if err := d.maps.Flows.Put(key, f); err != nil {
		t.Fatal(err)
	}
	now := netip.MustParseAddrPort("10.91.2.11:8080")
	if was == now {
		now = netip.MustParseAddrPort("10.91.2.12:8080")
	}
	ids := idsOf(t, d)
	res, err := d.ImportFlows(context.Background(), []datapath.ReplicatedFlow{{Protocol: config.ProtocolTCP, Client: client, Listener: replVIP, Backend: now}})
	if err != nil || res.Imported != 1 {
		t.Fatalf("ImportFlows = %+v, %v", res, err)
	}
	if _, dst := forwarded(t, d, segment(t, client, replVIP, false)); dst != now {
		t.Errorf("the flow went to %s, want the peer's %s", dst, now)
	}
	var r2 sluiceReverse
	if err := d.maps.Replies.Lookup(flowKeyOf(was, client, unix.IPPROTO_TCP), &r2); err == nil {
		t.Errorf("the reply entry from %s stayed: %+v", was, r2)
	}
	if a, b := activeConns(t, d, ids.of(t, "web/"+was.String())), activeConns(t, d, ids.of(t, "web/"+now.String())); a != 0 || b != 1 {
		t.Errorf("active flows: %d at %s, %d at %s; want 0 and 1", a, was, b, now)
	}
}

// TestSnapshotFlowsIsTheActiveSet snapshots many flows: the active ones, closing and idle ones
// left out, with their fullnat source.
func TestSnapshotFlowsIsTheActiveSet(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	r.apply(d, planFromYAML(t, "datapath: ebpf\nservices:\n"+replService(config.ModeFullNAT, "")))
	want := map[netip.AddrPort]datapath.ReplicatedFlow{}
	for i := range 300 {
		c := client(i, uint16(41000+i), false)
		src, dst := forwarded(t, d, segment(t, c, replVIP, true))
		switch i % 10 {
		case 0:
			forwarded(t, d, segmentWith(t, c, replVIP, layers.TCP{FIN: true, ACK: true}))
		case 1:
			var f sluiceFlow
			k := flowKeyOf(c, replVIP, unix.IPPROTO_TCP)
			if err := d.maps.Flows.Lookup(k, &f); err != nil {
				t.Fatal(err)
			}
			f.LastSeen = idleLastSeen(t)
			if err := d.maps.Flows.Put(k, f); err != nil {
				t.Fatal(err)
			}
		default:
			want[c] = datapath.ReplicatedFlow{Protocol: config.ProtocolTCP, Client: c, Listener: replVIP, Backend: dst, NATSource: src}
		}
	}
	got := 0
	err := d.SnapshotFlows(context.Background(), func(f datapath.ReplicatedFlow) bool {
		got++
		w, ok := want[f.Client]
		f.Idle = 0
		if !ok || f != w {
			t.Errorf("snapshot has %+v, want %+v (listed %v)", f, w, ok)
		}
		return true
	})
	if err != nil || got != len(want) {
		t.Errorf("snapshot of %d flows (%v), want %d", got, err, len(want))
	}
	stopped := 0
	if err := d.SnapshotFlows(context.Background(), func(datapath.ReplicatedFlow) bool { stopped++; return false }); err != nil || stopped != 1 {
		t.Errorf("a snapshot fn returning false saw %d flows (%v), want 1", stopped, err)
	}
}

// TestFlowEventsRingFullCountsDrops: a ring too small for a burst of new flows loses the rest,
// counted, and forwards them all the same.
func TestFlowEventsRingFullCountsDrops(t *testing.T) {
	n := newFxNet(t)
	n.enter(t)
	const ringBytes = 4096
	sizes := map[string]uint32{sluiceMapFlowEvents: ringBytes}
	for k, v := range testMapSizes {
		sizes[k] = v
	}
	e := &fxEnv{t: t, hook: hookTC, objs: loadUnpinned(t, sizes), net: n}
	e.reset(t)
	var g sluiceGlobals
	if err := e.objs.Config.Lookup(uint32(0), &g); err != nil {
		t.Fatal(err)
	}
	g.FlowEvents = 1
	e.put(e.objs.Config, uint32(0), g)
	const flows = 200
	for i := range flows {
		e.send(tcpPkt(ap(client4, uint16(30000+i)), ap(vipNat4, 80)).synPkt().frame(), false)
	}
	rd, err := ringbuf.NewReader(e.objs.FlowEvents)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	rd.SetDeadline(time.Now())
	read := 0
	for {
		rec, err := rd.Read()
		if err != nil {
			break
		}
		if len(rec.RawSample) != 64 {
			t.Fatalf("an event of %d bytes, want 64", len(rec.RawSample))
		}
		read++
	}
	var per []uint64
	if err := e.objs.FlowEventDrops.Lookup(uint32(0), &per); err != nil {
		t.Fatal(err)
	}
	drops := 0
	for _, c := range per {
		drops += int(c)
	}
	if read == 0 || drops == 0 || read+drops != flows {
		t.Errorf("%d events read and %d dropped, want both and %d in all", read, drops, flows)
	}
}

// TestLastSeenAgoAtAYoungUptime: an idle time longer than the uptime reads as boot time, never
// as a wrapped future.
func TestLastSeenAgoAtAYoungUptime(t *testing.T) {
	if got := lastSeenAgo(uint64(time.Second), time.Minute); got != 0 {
		t.Errorf("a minute before 1 s of uptime = %d, want 0", got)
	}
	if got := lastSeenAgo(uint64(time.Minute), time.Second); got != uint64(59*time.Second) {
		t.Errorf("a second before 1 m = %v", time.Duration(got))
	}
}

// TestFlowEventLayout: struct flow_event is flow_key then flow, as flowEvent reads it.
func TestFlowEventLayout(t *testing.T) {
	spec, err := loadSluice()
	if err != nil {
		t.Fatal(err)
	}
	if typ := spec.Maps[sluiceMapFlowEvents].Type; typ != ebpf.RingBuf {
		t.Errorf("flow_events is a %v", typ)
	}
	if n := binary.Size(flowEvent{}); n != 64 {
		t.Errorf("flowEvent is %d bytes, struct flow_event 64", n)
	}
}

// TestForeignSourceFlowsKeepTheirSource: in a fullnat fleet every node translates to a source of
// its own. A flow node A made, translated to A's source, moves to node B: B imports it with that
// source (flow_sources), sends its next segments from A's source and port, translates the
// backend's replies to A's source back to the client, and names it with A's source when it
// replicates it on (a full resync, when A comes back).
func TestForeignSourceFlowsKeepTheirSource(t *testing.T) {
	r := newRig(t)
	b := r.nodeB()
	own, theirs := "10.91.2.250", netip.MustParseAddrPort("10.91.2.251:20001")
	y := strings.Replace(replService(config.ModeFullNAT, ""), "    backends:\n", "    fullnat_source: "+own+"\n    backends:\n", 1)
	r.apply(b, planFromYAML(t, "datapath: ebpf\nservices:\n"+y))
	client, backend := netip.MustParseAddrPort("10.91.1.7:40007"), netip.MustParseAddrPort("10.91.2.11:8080")
	f := datapath.ReplicatedFlow{Protocol: config.ProtocolTCP, Client: client, Listener: replVIP, Backend: backend, NATSource: theirs, Idle: time.Second}
	if res, err := b.ImportFlows(context.Background(), []datapath.ReplicatedFlow{f}); err != nil || res.Imported != 1 {
		t.Fatalf("ImportFlows = %+v, %v; want the flow of another node's source imported", res, err)
	}
	var got sluiceFlow
	if err := b.maps.Flows.Lookup(flowKeyOf(client, replVIP, unix.IPPROTO_TCP), &got); err != nil || got.Flags&sluiceFlowFlagsFLOW_FOREIGN_SOURCE == 0 {
		t.Fatalf("the imported flow %+v (%v), want it marked as of a foreign source", got, err)
	}
	if src, dst := forwarded(t, b, segment(t, client, replVIP, false)); src != theirs || dst != backend {
		t.Errorf("node B sent the flow's next segment from %s to %s, want from %s to %s", src, dst, theirs, backend)
	}
	if src, dst := forwarded(t, b, segment(t, backend, theirs, false)); src != replVIP || dst != client {
		t.Errorf("node B translated the backend's reply to %s -> %s, want %s -> %s", src, dst, replVIP, client)
	}
	var named []datapath.ReplicatedFlow
	if err := b.SnapshotFlows(context.Background(), func(f datapath.ReplicatedFlow) bool { named = append(named, f); return true }); err != nil {
		t.Fatal(err)
	}
	if len(named) != 1 || named[0].NATSource != theirs {
		t.Errorf("node B replicates %+v, want the flow with its source %s", named, theirs)
	}
}

// TestTunnelFlowsAcrossFamiliesMoveBetweenNodes: a flow of an IPv6 VIP tunnelled to IPv4
// backends (6in4) is named with its IPv4 backend, and node B imports it: its next segment goes
// inside IPv4 to the same backend, which B would give no new flow (weight 0 there). As for dsr,
// the replies bypass the balancer: the import writes no replies entry.
func TestTunnelFlowsAcrossFamiliesMoveBetweenNodes(t *testing.T) {
	vip := netip.MustParseAddrPort("[fd00:91:9::100]:80")
	service := func(weight0 string) string {
		y := strings.Replace(replService(config.ModeTunnel, weight0), "vip: 10.91.9.100", "vip: "+vip.Addr().String(), 1)
		return strings.ReplaceAll(y, ", port: 8080", "")
	}
	r := newRig(t)
	a, b := r.datapath(Options{}), r.nodeB()
	pa := planFromYAML(t, "datapath: ebpf\nservices:\n"+service(""))
	r.apply(a, pa)
	client := netip.MustParseAddrPort("[fd00:91:1::7]:40007")
	_, backend := forwardedFrom(t, a, segment(t, client, vip, true), "veth0")
	if !backend.Addr().Is4() {
		t.Fatalf("node A sent the SYN to %s, want it inside IPv4 to an IPv4 backend", backend)
	}
	var f datapath.ReplicatedFlow
	if err := a.SnapshotFlows(context.Background(), func(rf datapath.ReplicatedFlow) bool {
		if rf.Client == client {
			f = rf
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if f.Listener != vip || f.Backend.Addr() != backend.Addr() || f.NATSource.IsValid() {
		t.Fatalf("node A names the flow %+v, want %s to %s's backend %s", f, client, vip, backend.Addr())
	}
	r.apply(b, planFromYAML(t, "datapath: ebpf\nservices:\n"+service(backend.Addr().String())))
	res, err := b.ImportFlows(context.Background(), []datapath.ReplicatedFlow{f})
	if err != nil || res.Imported != 1 {
		t.Fatalf("ImportFlows = %+v, %v", res, err)
	}
	if _, dst := forwardedFrom(t, b, segment(t, client, vip, false), "veth1"); dst.Addr() != backend.Addr() {
		t.Errorf("node B tunnelled the flow's next segment to %s, node A to %s", dst.Addr(), backend.Addr())
	}
	var n int
	var k sluiceFlowKey
	var v sluiceReverse
	for it := b.maps.Replies.Iterate(); it.Next(&k, &v); {
		n++
	}
	if n != 0 {
		t.Errorf("node B holds %d replies entries, want none: a tunnel's replies bypass the balancer", n)
	}
}
