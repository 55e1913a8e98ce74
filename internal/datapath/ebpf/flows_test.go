package ebpf

import (
	"context"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/datapath"
)

// flowAt puts a TCP flow from client 10.91.1.<i> to the VIP 10.91.9.100:80 sent to backend id
// (and its reply entry, keyed here as if the backend were the VIP) that saw its last packet at
// lastSeen.
func flowAt(t *testing.T, m *kernelMaps, i int, service, backend uint32, lastSeen uint64) {
	t.Helper()
	client := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 91, 1, byte(i)}), uint16(40000+i))
	vip := netip.MustParseAddrPort("10.91.9.100:80")
	if err := m.Flows.Put(flowKeyOf(client, vip, unix.IPPROTO_TCP), sluiceFlow{BackendId: backend, ServiceId: service, LastSeen: lastSeen}); err != nil {
		t.Fatal(err)
	}
	if err := m.Replies.Put(flowKeyOf(vip, client, unix.IPPROTO_TCP), sluiceReverse{ServiceId: service, BackendId: backend}); err != nil {
		t.Fatal(err)
	}
}

// countFlows counts the entries of flows and replies that refer to a backend id.
func countFlows(t *testing.T, m *kernelMaps, backend uint32) (flows, replies int) {
	t.Helper()
	err := readAll(m.Flows, func(_ sluiceFlowKey, f sluiceFlow) bool {
		if f.BackendId == backend {
			flows++
		}
		return true
	})
	if err == nil {
		err = readAll(m.Replies, func(_ sluiceFlowKey, r sluiceReverse) bool {
			if r.BackendId == backend {
				replies++
			}
			return true
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return flows, replies
}

// testFlowTimeout replaces the default flow timeout (5m) in the tests' plans (planFromYAML): short,
// so that a flow can be idle by it whatever the machine's uptime. A machine booted a minute ago, or
// a test run in a time namespace whose monotonic clock reads 60 s, has no "10 minutes ago".
const testFlowTimeout = 10 * time.Second

// idleLastSeen is a last-seen time of a flow idle by testFlowTimeout, on the clock the Go side
// judges flows by (monotonicNow).
func idleLastSeen(t *testing.T) uint64 {
	t.Helper()
	now, age := monotonicNow(), 2*uint64(testFlowTimeout)
	if now < age {
		t.Fatalf("CLOCK_MONOTONIC reads %v, less than the %v an idle flow needs", time.Duration(now), time.Duration(age))
	}
	return now - age
}

// TestStatusReadsTheKernel fills counters and flows and reads them back through a Datapath that
// only opened the pins (as `sluice list` does).
func TestStatusReadsTheKernel(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	p := planFromYAML(t, twoServices)
	r.apply(d, p)
	ids := idsOf(t, d)
	web, b11, b12 := ids.of(t, "web"), ids.of(t, "web/10.91.2.11:8080"), ids.of(t, "web/10.91.2.12:8080")
	perCPU := make([]sluiceStats, 2)
	perCPU[0] = sluiceStats{Packets: 3, Bytes: 300, Flows: 1}
	perCPU[1] = sluiceStats{Packets: 4, Bytes: 400, Flows: 2}
	if err := d.maps.BackendStats.Put(b11, perCPU); err != nil {
		t.Fatal(err)
	}
	now := monotonicNow()
	flowAt(t, d.maps, 1, web, b11, now)
	flowAt(t, d.maps, 2, web, b11, now-uint64(time.Second))
	flowAt(t, d.maps, 3, web, b11, idleLastSeen(t))
	flowAt(t, d.maps, 4, web, b12, now)

	lister := r.datapath(Options{})
	st, err := lister.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 2 || st[0].Name != "web" || st[1].Name != "web6" {
		t.Fatalf("Status = %+v", st)
	}
	w := st[0]
	if w.Protocol != "tcp" || w.VIP != "10.91.9.100" || w.Ports != "80" || w.Mode != "nat" || w.Scheduler != "maglev" || w.Slots != len(p.Services[0].Slots) {
		t.Errorf("web = %+v", w)
	}
	packets, bytes := uint64(7), uint64(700)
	want := datapath.BackendStatus{Address: "10.91.2.11", Port: 8080, Weight: 1, Share: p.Services[0].Share()[0], Flows: 3, ActiveFlows: 2, Packets: &packets, Bytes: &bytes}
	if !reflect.DeepEqual(w.Backends[0], want) {
		t.Errorf("backend 10.91.2.11 = %+v, want %+v", w.Backends[0], want)
	}
	if b := w.Backends[1]; b.ActiveFlows != 1 || b.Weight != 2 || b.Packets == nil || *b.Packets != 0 {
		t.Errorf("backend 10.91.2.12 = %+v", b)
	}
	if b := w.Backends[2]; b.Weight != 0 || b.Share != 0 {
		t.Errorf("backend 10.91.2.13 (weight 0) = %+v", b)
	}
	if web6 := st[1]; web6.Ports != "8000-8003" || web6.Mode != "fullnat" || web6.Protocol != "tcp" || len(web6.Backends) != 2 || web6.Backends[0].Share != 0.5 {
		t.Errorf("web6 = %+v", web6)
	}
}

// TestStatusWithNothingPinned reads no service and creates nothing.
func TestStatusWithNothingPinned(t *testing.T) {
	r := newRig(t)
	st, err := r.datapath(Options{}).Status(context.Background())
	if err != nil || st != nil {
		t.Errorf("Status = %v, %v", st, err)
	}
	if pathExists(r.pin) {
		t.Errorf("Status created %s", r.pin)
	}
}

// TestResetFlowsDeletesOneBackendsFlows deletes a backend's flows and replies, and no other's.
func TestResetFlowsDeletesOneBackendsFlows(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	p := planFromYAML(t, twoServices)
	r.apply(d, p)
	ids := idsOf(t, d)
	web, b11, b12 := ids.of(t, "web"), ids.of(t, "web/10.91.2.11:8080"), ids.of(t, "web/10.91.2.12:8080")
	now := monotonicNow()
	for i := range 3 {
		flowAt(t, d.maps, i, web, b11, now)
	}
	flowAt(t, d.maps, 9, web, b12, now)
	svc := &p.Services[0]
	n, err := d.ResetFlows(context.Background(), svc, svc.Backends[0])
	if err != nil || n != 3 {
		t.Fatalf("ResetFlows = %d, %v; want 3", n, err)
	}
	if f, rep := countFlows(t, d.maps, b11); f != 0 || rep != 0 {
		t.Errorf("backend 10.91.2.11 keeps %d flows and %d replies", f, rep)
	}
	if f, rep := countFlows(t, d.maps, b12); f != 1 || rep != 1 {
		t.Errorf("backend 10.91.2.12 has %d flows and %d replies, want 1 and 1", f, rep)
	}
	if n, err := d.ResetFlows(context.Background(), svc, svc.Backends[0]); n != 0 || err != nil {
		t.Errorf("resetting again = %d, %v", n, err)
	}
}
