package ebpf

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/plan"
)

const twoServices = `
services:
  - name: web
    vip: 10.91.9.100
    port: 80
    backends:
      - address: 10.91.2.11
        port: 8080
      - address: 10.91.2.12
        port: 8080
        weight: 2
      - address: 10.91.2.13
        port: 8080
        weight: 0
  - name: web6
    vip: fd00:91:9::100
    port: 8000-8003
    mode: fullnat
    scheduler: rr
    fallback: reject
    backends:
      - address: fd00:91:2::11
      - address: fd00:91:2::12
`

// TestApplyProgramsTheMaps checks the maps against the plan entry by entry.
func TestApplyProgramsTheMaps(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	p := planFromYAML(t, twoServices)
	if n := r.apply(d, p); n == 0 {
		t.Fatal("the first apply wrote nothing")
	}
	checkMaps(t, d.maps, p)
	var g sluiceGlobals
	if err := d.maps.Config.Lookup(uint32(0), &g); err != nil {
		t.Fatal(err)
	}
	if got := netip.AddrFrom16(g.Snat6); got != netip.MustParseAddr("fd00:91:2::1") || g.PortLow != fullnatPortLow || g.PortHigh != fullnatPortHigh {
		t.Errorf("config[0] = snat6 %s ports %d-%d", got, g.PortLow, g.PortHigh)
	}
}

// checkMaps compares every map Sluice writes with what the plan asks for.
func checkMaps(t *testing.T, m *kernelMaps, p *plan.Plan) {
	t.Helper()
	st, err := readState(m)
	if err != nil {
		t.Fatal(err)
	}
	wantVips := 0
	for i := range p.Services {
		ps := &p.Services[i]
		s := st.services[ps.Name]
		if s == nil || s.rec.retired() {
			t.Fatalf("service %s is not programmed", ps.Name)
		}
		if s.rec.RingSize != uint32(len(ps.Slots)) {
			t.Errorf("%s: ring of %d slots, want %d", ps.Name, s.rec.RingSize, len(ps.Slots))
		}
		for slot, bi := range ps.Slots {
			b := s.backends[ps.Backends[bi].ID()]
			if b == nil || s.slots[slot] != b.id {
				t.Fatalf("%s: slot %d holds backend id %d, want %s", ps.Name, slot, s.slots[slot], ps.Backends[bi].ID())
			}
		}
		for _, pb := range ps.Backends {
			b := s.backends[pb.ID()]
			recorded := pb
			recorded.MaxConns, recorded.MinConns = 0, 0 // in backend_opts, not in the record
			if b == nil || b.rec.retired() || b.rec.backend() != recorded || b.opts != backendSettingsOf(ps, pb) {
				t.Fatalf("%s: backend %s is not programmed as %+v", ps.Name, pb.ID(), pb)
			}
			addr, family := wireAddr(pb.Addr)
			want := sluiceBackend{Addr: addr, Port: wirePort(pb.Port), Family: family, Flags: sluiceBackendFlagsBACKEND_VALID}
			if pb.Weight > 0 {
				want.Flags |= sluiceBackendFlagsBACKEND_TAKES_NEW
			}
			if b.entry != want {
				t.Errorf("%s: backends[%d] = %+v, want %+v", ps.Name, b.id, b.entry, want)
			}
		}
		want := sluiceService{Id: s.id, RingOffset: s.rec.RingOffset, RingSize: uint32(len(ps.Slots)), Mode: wireModes[ps.Mode], Fallback: wireFallbacks[ps.Fallback], Flags: serviceFlagsOf(ps)}
		for _, k := range s.rec.vipKeys(ps.Ports) {
			if got, ok := st.vips[k]; !ok || got != want {
				t.Errorf("%s: vips[port %d] = %+v (present %v), want %+v", ps.Name, wirePort(k.Port), got, ok, want)
			}
			wantVips++
		}
		if s.ports.String() != ps.Ports.String() {
			t.Errorf("%s: ports %s, want %s", ps.Name, s.ports, ps.Ports)
		}
	}
	retired := 0
	for k, v := range st.vips {
		if v.Flags&sluiceServiceFlagsSERVICE_RETIRED == 0 {
			continue
		}
		retired++
		if owner := st.byID[v.Id]; owner == nil || !owner.rec.retired() || !owner.rec.owns(k, owner.ports) || v.RingSize != 0 {
			t.Errorf("vips entry %+v is marked retired but no retired service owns it", v)
		}
	}
	if len(st.vips)-retired != wantVips {
		t.Errorf("vips holds %d entries of services in the plan, want %d", len(st.vips)-retired, wantVips)
	}
}

// TestApplyIsIdempotent applies the same plan again: from the state it kept, after Resync (read
// back), and from a new Datapath over the same pins (a restart). None writes anything, and the
// restart keeps the ids and the flows.
func TestApplyIsIdempotent(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	p := planFromYAML(t, twoServices)
	r.apply(d, p)
	before := idsOf(t, d)
	b11 := before.of(t, "web/10.91.2.11:8080")
	flowAt(t, d.maps, 1, before.of(t, "web"), b11, monotonicNow())
	if n := r.apply(d, planFromYAML(t, twoServices)); n != 0 {
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
	if got := idsOf(t, restarted); !maps.Equal(got, before) {
		t.Errorf("ids after a restart: %v, before: %v", got, before)
	}
	if f, rep := countFlows(t, restarted.maps, b11); f != 1 || rep != 1 {
		t.Errorf("after a restart, backend 10.91.2.11 has %d flows and %d replies, want 1 and 1", f, rep)
	}
}

// ids are the ids of what is programmed: "web" and "web/10.91.2.11:8080" to their ids, and
// "web@" to the ring offset.
type ids map[string]uint32

// of returns one id, failing the test when there is none.
func (m ids) of(t *testing.T, key string) uint32 {
	t.Helper()
	id, ok := m[key]
	if !ok {
		t.Fatalf("%s is not programmed", key)
	}
	return id
}

func idsOf(t *testing.T, d *Datapath) ids {
	t.Helper()
	st, err := readState(d.maps)
	if err != nil {
		t.Fatal(err)
	}
	out := ids{}
	for name, s := range st.services {
		out[name], out[name+"@"] = s.id, s.rec.RingOffset
		for key, b := range s.backends {
			out[name+"/"+key] = b.id
		}
	}
	return out
}

// TestApplyAfterAnotherFlush flushes through another Datapath (another process): after Resync,
// Apply loads and pins everything again instead of writing to the maps it had.
func TestApplyAfterAnotherFlush(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	p := planFromYAML(t, twoServices)
	r.apply(d, p)
	if err := r.datapath(Options{}).Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	d.Resync()
	r.apply(d, p)
	other := r.datapath(Options{})
	st, err := other.Status(context.Background())
	if err != nil || len(st) != 2 {
		t.Fatalf("Status through the pins = %v, %v; want both services", st, err)
	}
	if got := r.pinnedLinks(); !slices.Equal(got, []string{"veth0-tc"}) {
		t.Errorf("pinned links %v, want [veth0-tc]", got)
	}
}

// TestFlushLeavesNothing flushes: no pin is left, and a Status reads no service.
func TestFlushLeavesNothing(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	r.apply(d, planFromYAML(t, twoServices))
	if err := d.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.pin); !os.IsNotExist(err) {
		t.Errorf("%s is still there after Flush (%v)", r.pin, err)
	}
	if n := r.tcxPrograms("veth0"); n != 0 {
		t.Errorf("%d programs still run at tcx ingress of veth0", n)
	}
	st, err := d.Status(context.Background())
	if err != nil || len(st) != 0 {
		t.Errorf("Status after Flush = %v, %v", st, err)
	}
}

// manyServices is a config of n services of three backends each; service "s<i>" listens on port
// 1000+i, and its backend 10.91.2.<i%200+10> has weight w.
func manyServices(n, w int) string {
	var b strings.Builder
	b.WriteString("services:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - name: s%d\n    vip: 10.91.9.100\n    port: %d\n    backends:\n", i, 1000+i)
		fmt.Fprintf(&b, "      - {address: 10.91.2.%d, weight: %d}\n", i%200+10, w)
		fmt.Fprintf(&b, "      - {address: 10.91.3.%d}\n      - {address: 10.91.4.%d}\n", i%200+10, i%200+10)
	}
	return b.String()
}

// slotChanges counts the slots of a service that send new flows to another backend in after
// than in before.
func slotChanges(before, after *plan.Service) int {
	n := 0
	for i := range after.Slots {
		if before.Backends[before.Slots[i]].ID() != after.Backends[after.Slots[i]].ID() {
			n++
		}
	}
	return n
}

// TestOneChangeCostsItsOwnWrites changes one backend's weight among many services: Apply writes
// that backend's record and the slots that changed (each with its previous backend in
// maglev_prev, for second chance), nothing of the other services. Adding a
// service writes its own entries, removing one deletes its own.
func TestOneChangeCostsItsOwnWrites(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	before := planFromYAML(t, manyServices(40, 1))
	r.apply(d, before)

	after := planFromYAML(t, manyServices(40, 3))
	after.Services = slices.Clone(before.Services)
	changed := planFromYAML(t, manyServices(40, 3)).Services
	i := slices.IndexFunc(changed, func(s plan.Service) bool { return s.Name == "s7" })
	after.Services[i] = changed[i]
	want := 1 + 2*slotChanges(&before.Services[i], &after.Services[i])
	if want == 1 {
		t.Fatal("the weight change moves no slot: pick another")
	}
	if got := r.apply(d, after); got != want {
		t.Errorf("a weight change wrote %d entries, want %d (1 record + the changed slots, twice)", got, want)
	}
	checkMaps(t, d.maps, after)

	added := planFromYAML(t, manyServices(41, 1))
	added.Services = slices.Concat(after.Services, added.Services[slices.IndexFunc(added.Services, func(s plan.Service) bool { return s.Name == "s40" }):][:1])
	s40 := &added.Services[len(added.Services)-1]
	// Counters, refusal, unforwarded and second chance counters of the service, counters of its
	// 3 backends, 3 records and entries, the ring, 1 port, 1 record.
	want = 4 + 3*3 + len(s40.Slots) + 1 + 1
	if got := r.apply(d, added); got != want {
		t.Errorf("adding a service wrote %d entries, want %d", got, want)
	}
	checkMaps(t, d.maps, added)

	removed := &plan.Plan{Services: added.Services[:len(added.Services)-1]}
	// Its port, its 3 backends' records (retired) and entries (no longer taking new flows, not
	// even persistent clients'), and its own record.
	if got := r.apply(d, removed); got != 1+3+3+1 {
		t.Errorf("removing a service wrote %d entries, want 8", got)
	}
	checkMaps(t, d.maps, removed)
}

// TestResyncRepairsTheMaps damages the maps behind the Datapath's back: Apply trusts what it
// programmed until Resync, after which it puts back what is missing or wrong and removes what
// no record explains.
func TestResyncRepairsTheMaps(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	p := planFromYAML(t, twoServices)
	r.apply(d, p)
	ids := idsOf(t, d)
	m := d.maps
	vip6 := p.Services[1].VIP
	if err := m.Vips.Delete(vipKeyOf(vip6, 8001, unix.IPPROTO_TCP)); err != nil {
		t.Fatal(err)
	}
	if err := m.Vips.Put(vipKeyOf(vip6, 9999, unix.IPPROTO_TCP), sluiceService{Id: ids.of(t, "web6")}); err != nil {
		t.Fatal(err)
	}
	if err := m.Maglev.Put(ids.of(t, "web@"), uint32(4242)); err != nil {
		t.Fatal(err)
	}
	if err := m.Backends.Put(ids.of(t, "web/10.91.2.12:8080"), sluiceBackend{}); err != nil {
		t.Fatal(err)
	}
	if err := m.Backends.Put(uint32(4242), sluiceBackend{Flags: sluiceBackendFlagsBACKEND_VALID}); err != nil {
		t.Fatal(err)
	}
	if n := r.apply(d, p); n != 0 {
		t.Errorf("Apply without Resync wrote %d entries, want 0: it trusts what it programmed", n)
	}
	d.Resync()
	if n := r.apply(d, p); n != 5 {
		t.Errorf("the repair wrote %d entries, want 5", n)
	}
	checkMaps(t, m, p)
	var e sluiceBackend
	if err := m.Backends.Lookup(uint32(4242), &e); err != nil || e.Flags != 0 {
		t.Errorf("the stray backends entry is %+v, %v; want invalid", e, err)
	}
	d.Resync()
	if n := r.apply(d, p); n != 0 {
		t.Errorf("applying after the repair wrote %d entries", n)
	}
}

// TestRingMovesWhenItsSizeChanges grows a table: it moves to a new range, and its old range
// goes to the next table that fits (first fit).
func TestRingMovesWhenItsSizeChanges(t *testing.T) {
	const web = `
services:
  - name: web
    vip: 10.91.9.100
    port: 80
    table_size: %d
    backends: [{address: 10.91.2.11}, {address: 10.91.2.12}]
  - name: web2
    vip: 10.91.9.100
    port: 81
    table_size: 7
    backends: [{address: 10.91.2.11}]
`
	const more = `
  - name: web3
    vip: 10.91.9.100
    port: 82
    table_size: 13
    backends: [{address: 10.91.2.11}]
`
	r := newRig(t)
	d := r.datapath(Options{})
	r.apply(d, planFromYAML(t, fmt.Sprintf(web, 13)))
	if ids := idsOf(t, d); ids.of(t, "web@") != 0 || ids.of(t, "web2@") != 13 {
		t.Fatalf("rings at %d and %d, want 0 and 13", ids["web@"], ids["web2@"])
	}
	grown := planFromYAML(t, fmt.Sprintf(web, 17))
	r.apply(d, grown)
	checkMaps(t, d.maps, grown)
	if at := idsOf(t, d).of(t, "web@"); at != 20 {
		t.Errorf("the grown ring is at %d, want 20 (after web2's)", at)
	}
	added := planFromYAML(t, fmt.Sprintf(web, 17)+more)
	r.apply(d, added)
	checkMaps(t, d.maps, added)
	if at := idsOf(t, d).of(t, "web3@"); at != 0 {
		t.Errorf("the new ring is at %d, want 0 (the range web left)", at)
	}
}

// TestPlanTooBigWritesNothing fails a plan needing more vips entries than the map holds, before
// writing anything.
func TestPlanTooBigWritesNothing(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	p := planFromYAML(t, `
services:
  - {name: a, vip: 10.91.9.100, port: 1-40000, backends: [{address: 10.91.2.11}]}
  - {name: b, vip: 10.91.9.101, port: 1-40000, backends: [{address: 10.91.2.11}]}
`)
	n, err := d.apply(context.Background(), p)
	if err == nil || !strings.Contains(err.Error(), "80000 vips entries") || n != 0 {
		t.Errorf("apply = %d writes, %v; want an error about 80000 vips entries and no write", n, err)
	}
}

// TestResyncReadsTheSettingsBack: the maps read back after Resync hold every service's and
// backend's settings (persistence, limits, weights of a connection-counting scheduler), so a
// resync of unchanged maps writes nothing.
func TestResyncReadsTheSettingsBack(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	p := planFromYAML(t, threeBackends("    scheduler: wlc\n    persistence_timeout: 60s\n    limits: {connections: 40, new_connections_per_second: 5}"))
	if n := r.apply(d, p); n == 0 {
		t.Fatal("the first apply wrote nothing")
	}
	d.Resync()
	if n := r.apply(d, p); n != 0 {
		t.Errorf("applying the same plan after Resync wrote %d entries, want 0: a setting was not read back", n)
	}
}
