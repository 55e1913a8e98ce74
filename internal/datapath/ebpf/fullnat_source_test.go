package ebpf

import (
	"net/netip"
	"strings"
	"testing"
)

// The fixture world's fullnat services with a source of their own (fullnat_source): addresses of
// the backends' network that the balancer does not hold, as a backup holds its pair's floating
// address. Their replies reach the balancer because the backends route them there.
var (
	vipOwn4, vipOwn6 = mustAddr("10.0.9.7"), mustAddr("fd00:9::7")
	own4, own6       = mustAddr("10.0.2.250"), mustAddr("fd00:2::250")
	ownSnat4         = ap(own4, fxNatPort)
	ownSnat6         = ap(own6, fxNatPort)
)

// fxOwnSources are the fixture world's services with their own fullnat source, beside fxServices.
var fxOwnSources = []struct {
	svc fxService
	src netip.Addr
}{
	{fxService{18, vipOwn4, 80, protoTCP, "fullnat", "drop", []uint32{2}}, own4},
	{fxService{19, vipOwn6, 53, protoUDP, "fullnat", "drop", []uint32{3}}, own6},
}

// resetOwnSources writes the services of fxOwnSources: their entries in service_sources (the
// fixture world's one source port) before the vips entries that point the program there.
func (e *fxEnv) resetOwnSources() {
	for _, o := range fxOwnSources {
		s := o.svc
		e.setRing(s.id, s.ring...)
		g := sluiceGlobals{PortLow: fxNatPort, PortHigh: fxNatPort}
		if o.src.Is4() {
			g.Snat4 = o.src.As4()
		} else {
			g.Snat6 = o.src.As16()
		}
		e.put(e.objs.ServiceSources, s.id, g)
		e.put(e.objs.Vips, vipKeyOf(s.vip, s.port, s.proto), sluiceService{
			Id: s.id, RingOffset: s.id * fxRingSize, RingSize: fxRingSize, Mode: wireModes[s.mode],
			Source: sluiceServiceSourceSOURCE_OWN,
		})
	}
}

// ownSourceFixtures: a fullnat service with a fullnat_source translates its clients to that
// address instead of the node's (config), and translates its backends' replies to it back.
func ownSourceFixtures() []fixture {
	first := func(p pkt) func(e *fxEnv) { return func(e *fxEnv) { e.send(p.frame(), false) } }
	syn := tcpPkt(cli4, ap(vipOwn4, 80)).synPkt()
	reply := tcpPkt(ap(b2v4, 8080), ownSnat4).fromBackend(macB2)
	toNode := tcpPkt(ap(b2v4, 8080), snat4).fromBackend(macB2)
	udp6 := udpPkt(cli6, ap(vipOwn6, 53))
	reply6 := udpPkt(ap(b1v6, 53), ownSnat6).fromBackend(macB1)
	return []fixture{
		{
			name: "fullnat_source: the SYN leaves from the service's own source", in: syn.frame(), want: vRedirect,
			out: syn.from(ownSnat4).to(ap(b2v4, 8080)).routed(macLBBackend, macB2).frame(),
			check: func(e *fxEnv) {
				if f, ok := e.flow(cli4, ap(vipOwn4, 80), protoTCP); !ok || f.BackendId != 2 || f.ServiceId != 18 || f.NatPort != wirePort(fxNatPort) {
					e.t.Errorf("flow %+v (found %v), want backend 2 of service 18 from port %d", f, ok, fxNatPort)
				}
				if r, ok := e.reply(ap(b2v4, 8080), ownSnat4, protoTCP); !ok || r.Client != wireAddrOf(client4) || r.Vip != wireAddrOf(vipOwn4) || r.ServiceId != 18 {
					e.t.Errorf("reply entry %+v (found %v), want one keyed by the own source", r, ok)
				}
				if _, ok := e.reply(ap(b2v4, 8080), snat4, protoTCP); ok {
					e.t.Error("a reply entry keyed by the node's source")
				}
			},
		},
		{
			name: "fullnat_source: the backend's reply to it goes back to the client", prepare: first(syn), in: reply.frame(), fromBackend: true,
			want: vRedirect, out: reply.from(ap(vipOwn4, 80)).to(cli4).routed(macLBClient, macClient).frame(),
		},
		{name: "fullnat_source: a reply to the node's source is not the flow's", prepare: first(syn), in: toNode.frame(), fromBackend: true, want: vPass},
		{
			name: "fullnat_source: IPv6 UDP leaves from the own source", in: udp6.frame(), want: vRedirect,
			out: udp6.from(ownSnat6).to(ap(b1v6, 53)).routed(macLBBackend, macB1).frame(),
		},
		{
			name: "fullnat_source: an IPv6 UDP reply goes back to the client", prepare: first(udp6), in: reply6.frame(), fromBackend: true,
			want: vRedirect, out: reply6.from(ap(vipOwn6, 53)).to(cli6).routed(macLBClient, macClient).frame(),
		},
		{
			name:    "fullnat_source: a service pointed at service_sources without an entry drops",
			prepare: func(e *fxEnv) { e.put(e.objs.ServiceSources, uint32(18), sluiceGlobals{}) },
			in:      syn.frame(), want: vDrop,
		},
	}
}

// TestApplyFullNATSource: a fullnat service's fullnat_source goes to service_sources, with the
// node's port range, before its vips entries point the program there; the node's own source
// leaves it out. Applying the same plan again, after Resync or after a restart (the state read
// back from the maps) writes nothing; dropping the key points the vips entries back at config.
func TestApplyFullNATSource(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	own := strings.Replace(twoServices, "    mode: fullnat\n", "    mode: fullnat\n    fullnat_source: fd00:91:2::250\n", 1)
	p := planFromYAML(t, own)
	r.apply(d, p)
	id := idsOf(t, d).of(t, "web6")
	var got sluiceGlobals
	if err := d.maps.ServiceSources.Lookup(id, &got); err != nil {
		t.Fatal(err)
	}
	want := sluiceGlobals{Snat6: netip.MustParseAddr("fd00:91:2::250").As16(), PortLow: fullnatPortLow, PortHigh: fullnatPortHigh}
	if got != want {
		t.Errorf("service_sources[%d] = %+v, want %+v", id, got, want)
	}
	wantSource(t, d, "fd00:91:9::100", sluiceServiceSourceSOURCE_OWN)
	var g sluiceGlobals
	if err := d.maps.Config.Lookup(uint32(0), &g); err != nil || g.Snat6 != [16]byte{} {
		t.Errorf("config holds the node's IPv6 source %x (%v), though no service uses it", g.Snat6, err)
	}
	if n := r.apply(d, planFromYAML(t, own)); n != 0 {
		t.Errorf("applying the same plan again wrote %d entries", n)
	}
	d.Resync()
	if n := r.apply(d, p); n != 0 {
		t.Errorf("applying the same plan after Resync wrote %d entries", n)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	restarted := r.datapath(Options{})
	if n := r.apply(restarted, p); n != 0 {
		t.Errorf("applying the same plan after a restart wrote %d entries", n)
	}
	r.apply(restarted, planFromYAML(t, twoServices))
	wantSource(t, restarted, "fd00:91:9::100", sluiceServiceSourceSOURCE_NODE)
	if err := restarted.maps.Config.Lookup(uint32(0), &g); err != nil || g.Snat6 == [16]byte{} {
		t.Errorf("config holds no node IPv6 source (%v) once the service has none of its own", err)
	}
}

// wantSource checks the source of every vips entry of a VIP.
func wantSource(t *testing.T, d *Datapath, vip string, want sluiceServiceSource) {
	t.Helper()
	a, _ := wireAddr(netip.MustParseAddr(vip))
	n := 0
	var k sluiceVipKey
	var v sluiceService
	for it := d.maps.Vips.Iterate(); it.Next(&k, &v); {
		if k.Addr == a {
			n++
			if v.Source != want {
				t.Errorf("vips entry of %s port %d has source %d, want %d", vip, wirePort(k.Port), v.Source, want)
			}
		}
	}
	if n == 0 {
		t.Errorf("no vips entry of %s", vip)
	}
}
