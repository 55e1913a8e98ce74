package ebpf

import (
	"context"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/plan"
)

const oneService = `
services:
  - name: web
    vip: 10.91.9.100
    port: 80
    backends:
      - address: 10.91.2.11
      - address: 10.91.2.12
`

const oneBackendLeft = `
services:
  - name: web
    vip: 10.91.9.100
    port: 80
    backends:
      - address: 10.91.2.11
`

// backendOf reads the state of a backend of a service, nil when it has none.
func backendOf(t *testing.T, d *Datapath, service, backend string) *backendState {
	t.Helper()
	st, err := readState(d.maps)
	if err != nil {
		t.Fatal(err)
	}
	if s := st.services[service]; s != nil {
		return s.backends[backend]
	}
	return nil
}

// TestRemovedBackendKeepsItsFlows removes a backend that has a flow: it stays valid, retired and
// unlisted, while the flow is active; once the flow is idle, a read-back apply frees it, its flow
// and its id, which the next new backend gets.
func TestRemovedBackendKeepsItsFlows(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	r.apply(d, planFromYAML(t, oneService))
	ids := idsOf(t, d)
	web, gone := ids.of(t, "web"), ids.of(t, "web/10.91.2.12")
	flowAt(t, d.maps, 1, web, gone, monotonicNow())

	r.apply(d, planFromYAML(t, oneBackendLeft))
	b := backendOf(t, d, "web", "10.91.2.12")
	if b == nil || !b.rec.retired() || b.entry.Flags != sluiceBackendFlagsBACKEND_VALID {
		t.Fatalf("the removed backend is %+v, want retired and valid", b)
	}
	st, err := d.Status(context.Background())
	if err != nil || len(st[0].Backends) != 1 {
		t.Errorf("Status lists %+v (%v), want the one backend left", st, err)
	}
	d.Resync()
	r.apply(d, planFromYAML(t, oneBackendLeft))
	if backendOf(t, d, "web", "10.91.2.12") == nil {
		t.Fatal("a resync freed a backend whose flow is active")
	}

	flowAt(t, d.maps, 1, web, gone, idleLastSeen(t))
	d.Resync()
	r.apply(d, planFromYAML(t, oneBackendLeft))
	if b := backendOf(t, d, "web", "10.91.2.12"); b != nil {
		t.Fatalf("the idle retired backend is still there: %+v", b)
	}
	var e sluiceBackend
	if err := d.maps.Backends.Lookup(gone, &e); err != nil || e.Flags&sluiceBackendFlagsBACKEND_VALID != 0 {
		t.Errorf("backends[%d] = %+v, %v; want invalid", gone, e, err)
	}
	if f, rep := countFlows(t, d.maps, gone); f != 0 || rep != 0 {
		t.Errorf("the freed backend keeps %d flows and %d replies", f, rep)
	}
	if err := d.maps.BackendStats.Put(gone, []sluiceStats{{Packets: 5}}); err != nil {
		t.Fatal(err)
	}
	r.apply(d, planFromYAML(t, oneService))
	if got := idsOf(t, d).of(t, "web/10.91.2.12"); got != gone {
		t.Errorf("the next new backend got id %d, want the freed %d", got, gone)
	}
	if st, err := d.Status(context.Background()); err != nil || st[0].Backends[1].Packets == nil || *st[0].Backends[1].Packets != 0 {
		t.Errorf("the new backend starts with %+v (%v), want zero counters", st[0].Backends[1], err)
	}
}

// TestRemovedBackendComesBackWithItsID re-adds a removed backend before it was freed: it gets
// its id back, so its flows never noticed.
func TestRemovedBackendComesBackWithItsID(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	r.apply(d, planFromYAML(t, oneService))
	before := idsOf(t, d)
	r.apply(d, planFromYAML(t, oneBackendLeft))
	r.apply(d, planFromYAML(t, oneService))
	if after := idsOf(t, d); after.of(t, "web/10.91.2.12") != before.of(t, "web/10.91.2.12") {
		t.Errorf("the backend came back with id %d, had %d", after["web/10.91.2.12"], before["web/10.91.2.12"])
	}
	if b := backendOf(t, d, "web", "10.91.2.12"); b.rec.retired() {
		t.Error("the backend is still retired")
	}
}

// TestRemovedServiceIsRetired removes a service with a flow: its vips entries stay, marked
// retired (established flows only), and its record and backends stay (retired, unlisted) until
// the flow is idle, when all of it goes; added back meanwhile, it keeps its ids.
func TestRemovedServiceIsRetired(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	p := planFromYAML(t, twoServices)
	r.apply(d, p)
	ids := idsOf(t, d)
	web6, b11 := ids.of(t, "web6"), ids.of(t, "web6/fd00:91:2::11")
	flowAt(t, d.maps, 1, web6, b11, monotonicNow())
	onlyWeb := &plan.Plan{Services: p.Services[:1]}
	r.apply(d, onlyWeb)
	checkMaps(t, d.maps, onlyWeb)
	web6Key := vipKeyOf(p.Services[1].VIP, uint16(p.Services[1].Ports.First()), wireProtocols[p.Services[1].Protocol])
	var v sluiceService
	if err := d.maps.Vips.Lookup(web6Key, &v); err != nil || v.Flags != sluiceServiceFlagsSERVICE_RETIRED || v.Id != web6 || v.RingSize != 0 {
		t.Errorf("web6's vips entry is %+v (%v), want it kept, retired, without a ring", v, err)
	}
	st, err := d.Status(context.Background())
	if err != nil || len(st) != 1 {
		t.Errorf("Status lists %d services (%v), want web only", len(st), err)
	}
	r.apply(d, p)
	if after := idsOf(t, d); after.of(t, "web6") != web6 || after.of(t, "web6/fd00:91:2::11") != b11 {
		t.Errorf("web6 came back with other ids: %v, had %v", after, ids)
	}

	r.apply(d, onlyWeb)
	flowAt(t, d.maps, 1, web6, b11, idleLastSeen(t))
	d.Resync()
	r.apply(d, onlyWeb)
	if _, ok := idsOf(t, d)["web6"]; ok {
		t.Error("the retired service was not freed once its flows were idle")
	}
	if err := d.maps.Vips.Lookup(web6Key, &v); err == nil {
		t.Errorf("the freed service's vips entry is left: %+v", v)
	}
	checkMaps(t, d.maps, onlyWeb)
}

// TestRetiredServiceYieldsItsVIP removes a service with a flow and adds another on its VIP and
// port in the same plan: the new service takes the vips entry, and sweeping the retired one
// later leaves it alone.
func TestRetiredServiceYieldsItsVIP(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	p := planFromYAML(t, oneService)
	r.apply(d, p)
	ids := idsOf(t, d)
	flowAt(t, d.maps, 1, ids.of(t, "web"), ids.of(t, "web/10.91.2.11"), idleLastSeen(t))
	renamed := planFromYAML(t, strings.Replace(oneService, "name: web", "name: www", 1))
	r.apply(d, renamed)
	checkMaps(t, d.maps, renamed)
	d.Resync()
	r.apply(d, renamed)
	checkMaps(t, d.maps, renamed)
	if _, ok := idsOf(t, d)["web"]; ok {
		t.Error("the retired service was not freed once its flows were idle")
	}
}
