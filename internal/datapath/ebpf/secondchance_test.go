package ebpf

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/sluicelb/sluice/internal/plan"
)

// midFlow sends a mid-flow segment (ACK, data) of client's connection and returns the backend
// the program sent it to.
func midFlow(t *testing.T, d *Datapath, client netip.AddrPort) netip.Addr {
	t.Helper()
	return destination(t, d, segmentWith(t, client, vipOf(client), layers.TCP{ACK: true, PSH: true})).Addr()
}

// forgetFlows empties the flow table, as on a node that never saw the flows.
func forgetFlows(t *testing.T, d *Datapath) {
	t.Helper()
	var keys []sluiceFlowKey
	if err := readAll(d.maps.Flows, func(k sluiceFlowKey, _ sluiceFlow) bool { keys = append(keys, k); return true }); err != nil {
		t.Fatal(err)
	}
	var w writer
	if err := deleteAll(&w, d.maps.Flows, keys); err != nil {
		t.Fatal(err)
	}
}

// clientOn is the first test client whose mid-flow segment the program sends to backend b (the
// segment makes its flow: forgetFlows takes it back).
func clientOn(t *testing.T, d *Datapath, b netip.Addr) netip.AddrPort {
	t.Helper()
	for i := 0; ; i++ {
		if c := client(i, 40000, false); midFlow(t, d, c) == b {
			return c
		}
	}
}

// leaving is the backend of threeBackends whose weight the second chance tests set to 0.
var leaving = netip.MustParseAddr("10.91.2.13")

// clientOfLeaving programs threeBackends on a rig and returns a client whose connection leaving
// holds, its flow forgotten (as on a node that never saw it).
func clientOfLeaving(t *testing.T) (*rig, *Datapath, netip.AddrPort) {
	t.Helper()
	r := newRig(t)
	d := r.datapath(Options{})
	r.apply(d, planFromYAML(t, threeBackends("")))
	c := clientOn(t, d, leaving)
	forgetFlows(t, d)
	return r, d, c
}

// prevEntries counts maglev_prev's entries.
func prevEntries(t *testing.T, d *Datapath) int {
	t.Helper()
	n := 0
	if err := readAll(d.maps.MaglevPrev, func(uint32, sluicePrevSlot) bool { n++; return true }); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSecondChance: a backend's weight goes to 0 while connections to it run on another node.
// Their mid-flow segments reach this node, which has no flow for them: they go to the backend
// their slot had before the change (second chance), counted; a SYN on the same 5-tuple is a new
// connection and goes by the new table; once the entries expire, a mid-flow segment goes by the
// new table too; a table that changes size, or a service removed, leaves no entry behind.
func TestSecondChance(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	r.apply(d, planFromYAML(t, threeBackends("")))
	var held []netip.AddrPort
	for i := 0; len(held) < 20; i++ {
		if c := client(i, 40000, false); midFlow(t, d, c) == leaving {
			held = append(held, c)
		}
	}
	forgetFlows(t, d)
	weightZero := strings.Replace(threeBackends(""), "weight: 3", "weight: 0", 1)
	r.apply(d, planFromYAML(t, weightZero))
	if prevEntries(t, d) == 0 {
		t.Fatal("the table changed and maglev_prev is empty")
	}
	for _, c := range held {
		if got := midFlow(t, d, c); got != leaving {
			t.Errorf("client %s: a mid-flow segment without a flow went to %s, want %s (its slot's previous backend)", c, got, leaving)
		}
	}
	st, ok, err := d.ServiceStatus(context.Background(), "web")
	if err != nil || !ok || st.SecondChances != uint64(len(held)) {
		t.Errorf("second chances: %d (%v, %v), want %d", st.SecondChances, ok, err, len(held))
	}
	for _, c := range held {
		if got := connect(t, d, c); got == leaving {
			t.Errorf("client %s: a SYN went to %s, which takes no new flow", c, got)
		}
	}

	// Expired: no second chance any more.
	forgetFlows(t, d)
	var keys []uint32
	var values []sluicePrevSlot
	if err := readAll(d.maps.MaglevPrev, func(k uint32, e sluicePrevSlot) bool {
		e.UntilNs = monotonicNow() - uint64(time.Second) // the program's coarse clock lags by a tick
		keys, values = append(keys, k), append(values, e)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	var w writer
	if err := putAll(&w, d.maps.MaglevPrev, keys, values); err != nil {
		t.Fatal(err)
	}
	for _, c := range held {
		if got := midFlow(t, d, c); got == leaving {
			t.Errorf("client %s: an expired entry still sent a mid-flow segment to %s", c, got)
		}
	}
	d.Resync() // the read-back apply finds the expired entries and deletes them
	r.apply(d, planFromYAML(t, weightZero))
	if n := prevEntries(t, d); n != 0 {
		t.Errorf("maglev_prev holds %d expired entries after an apply", n)
	}

	// A removed service leaves none behind.
	r.apply(d, planFromYAML(t, threeBackends("")))
	if prevEntries(t, d) == 0 {
		t.Fatal("the table changed back and maglev_prev is empty")
	}
	r.apply(d, planFromYAML(t, "datapath: ebpf\nservices: []\n"))
	if n := prevEntries(t, d); n != 0 {
		t.Errorf("maglev_prev holds %d entries of a removed service", n)
	}
}

// TestSecondChanceKeepsAccessLists: a client the access lists refuse gets no second chance.
func TestSecondChanceKeepsAccessLists(t *testing.T) {
	r, d, c := clientOfLeaving(t)
	denied := strings.Replace(threeBackends("    source_deny: ["+c.Addr().String()+"]"), "weight: 3", "weight: 0", 1)
	r.apply(d, planFromYAML(t, denied))
	if v := runVerdict(t, d, segmentWith(t, c, vipOf(c), layers.TCP{ACK: true})); v != tcShot {
		t.Errorf("a denied client's mid-flow segment got verdict %d, want dropped (%d)", v, tcShot)
	}
}

// TestSecondChanceKeepsTheFirstChange: a weight goes to 0, back, and to 0 again; each slot keeps
// the backend it had before the first change.
func TestSecondChanceKeepsTheFirstChange(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	r.apply(d, planFromYAML(t, threeBackends("")))
	weightZero := strings.Replace(threeBackends(""), "weight: 3", "weight: 0", 1)
	r.apply(d, planFromYAML(t, weightZero))
	first := map[uint32]uint32{}
	if err := readAll(d.maps.MaglevPrev, func(k uint32, e sluicePrevSlot) bool { first[k] = e.BackendId; return true }); err != nil {
		t.Fatal(err)
	}
	r.apply(d, planFromYAML(t, threeBackends("")))
	r.apply(d, planFromYAML(t, weightZero))
	got := map[uint32]uint32{}
	if err := readAll(d.maps.MaglevPrev, func(k uint32, e sluicePrevSlot) bool { got[k] = e.BackendId; return true }); err != nil {
		t.Fatal(err)
	}
	if len(first) == 0 || !maps.Equal(got, first) {
		t.Errorf("after two more changes maglev_prev holds %d entries (%v), want the first change's %d", len(got), got, len(first))
	}
}

// TestResetFlowsForgetsSecondChance: a backend whose flows are reset (on_failure: reset) loses
// its second chances too: its connections must break, not come back.
func TestResetFlowsForgetsSecondChance(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	r.apply(d, planFromYAML(t, threeBackends("")))
	c := clientOn(t, d, leaving)
	weightZero := planFromYAML(t, strings.Replace(threeBackends(""), "weight: 3", "weight: 0", 1))
	r.apply(d, weightZero)
	svc := &weightZero.Services[0]
	i := slices.IndexFunc(svc.Backends, func(b plan.Backend) bool { return b.Addr == leaving })
	if _, err := d.ResetFlows(context.Background(), svc, svc.Backends[i]); err != nil {
		t.Fatal(err)
	}
	if got := midFlow(t, d, c); got == leaving {
		t.Errorf("client %s: after its backend's flows were reset, a mid-flow segment went back to %s", c, got)
	}
}

// TestSecondChanceEndsAtTheReplicationHorizon: once replication tells that every flow the peers
// made after a change is here, a mid-flow segment without a flow began after the change, and the
// current table placed it: its slot's second chance goes. A horizon before the change keeps it;
// slots read back from the maps (their change not seen by this process) keep theirs.
func TestSecondChanceEndsAtTheReplicationHorizon(t *testing.T) {
	ctx := context.Background()
	r, d, c := clientOfLeaving(t)
	weightZero := planFromYAML(t, strings.Replace(threeBackends(""), "weight: 3", "weight: 0", 1))
	before := time.Now()
	r.apply(d, weightZero)
	changed := prevEntries(t, d)
	if changed == 0 {
		t.Fatal("the table changed and maglev_prev is empty")
	}
	if err := d.ReplicatedUntil(ctx, before.Add(-time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if n := prevEntries(t, d); n != changed {
		t.Errorf("a horizon before the change left %d of %d entries", n, changed)
	}
	if got := midFlow(t, d, c); got != leaving {
		t.Errorf("before the horizon passed the change, a mid-flow segment went to %s, want %s (second chance)", got, leaving)
	}
	forgetFlows(t, d)
	if err := d.ReplicatedUntil(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	if n := prevEntries(t, d); n != 0 {
		t.Errorf("a horizon past the change left %d entries", n)
	}
	if got := midFlow(t, d, c); got == leaving {
		t.Errorf("past the horizon, a mid-flow segment still went to %s, the slot's previous backend", got)
	}

	// Read back: no change time, the entries stay for flow_timeout.
	forgetFlows(t, d)
	r.apply(d, planFromYAML(t, threeBackends("")))
	if prevEntries(t, d) == 0 {
		t.Fatal("the table changed back and maglev_prev is empty")
	}
	d.Resync()
	r.apply(d, planFromYAML(t, threeBackends("")))
	if err := d.ReplicatedUntil(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	if prevEntries(t, d) == 0 {
		t.Error("a horizon removed second chances read back from the maps, whose change it cannot place")
	}
}
