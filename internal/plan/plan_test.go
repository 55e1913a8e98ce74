package plan

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
)

func mustPlan(t *testing.T, yaml string) *Plan {
	t.Helper()
	return mustPlanWith(t, yaml, nil)
}

func mustPlanWith(t *testing.T, yaml string, available Availability) *Plan {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Build(cfg, available)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func service(scheduler string, weights ...int) string {
	y := fmt.Sprintf("services:\n- name: web\n  vip: 10.0.0.1\n  port: 80\n  scheduler: %s\n  backends:\n", scheduler)
	for i, w := range weights {
		y += fmt.Sprintf("  - {address: 10.0.1.%d, weight: %d}\n", i+1, w)
	}
	return y
}

func TestInterleaveIsSmoothAndWeighted(t *testing.T) {
	got := interleave([]int{5, 1, 1})
	want := []int{0, 0, 1, 0, 2, 0, 0}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("interleave = %v, want %v", got, want)
	}
	if got := interleave([]int{20, 10, 0}); !reflect.DeepEqual(got, []int{0, 1, 0}) {
		t.Fatalf("gcd not reduced: %v", got)
	}
}

func TestSchedulersShares(t *testing.T) {
	for _, sched := range []string{"maglev", "wrr", "hash", "random"} {
		p := mustPlan(t, service(sched, 1, 2, 0, 1))
		share := p.Services[0].Share()
		for i, want := range []float64{0.25, 0.5, 0, 0.25} {
			if math.Abs(share[i]-want) > 0.01 {
				t.Errorf("%s: backend %d share %.3f, want %.2f", sched, i, share[i], want)
			}
		}
	}
	p := mustPlan(t, service("rr", 1, 5, 0))
	if got := p.Services[0].Slots; !reflect.DeepEqual(got, []int{0, 1}) {
		t.Errorf("rr ignores weights except 0: slots %v", got)
	}
}

func TestMaglevTableSize(t *testing.T) {
	for _, tc := range []struct {
		datapath string
		weights  []int
		want     int
		why      string
	}{
		{"ebpf", []int{1, 1, 1}, 1021, "the paper's size on ebpf"},
		{"ebpf", []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0}, 2053, "11 backends, one drained: drained backends count"},
		{"nft", []int{1, 1, 1}, 61, "a compact table on nft"},
		{"nft", []int{1, 1, 1, 1, 1, 1}, 127, "6 backends"},
		{"nft", []int{1, 1, 1, 1, 1, 1, 0}, 251, "7 backends, one drained: drained backends count"},
	} {
		p := mustPlan(t, "datapath: "+tc.datapath+"\n"+service("maglev", tc.weights...))
		if n := len(p.Services[0].Slots); n != tc.want {
			t.Errorf("%s, %d backends: M = %d, want %d (%s)", tc.datapath, len(tc.weights), n, tc.want, tc.why)
		}
	}
	p := mustPlan(t, service("maglev", 1, 1)+"  table_size: 65537\n")
	if n := len(p.Services[0].Slots); n != 65537 {
		t.Fatalf("M = %d, want 65537", n)
	}
}

func TestNoActiveBackendHasNoSlots(t *testing.T) {
	p := mustPlan(t, service("maglev", 0, 0))
	if s := p.Services[0]; len(s.Slots) != 0 || s.Fallback != "drop" {
		t.Fatalf("slots %d fallback %q", len(s.Slots), s.Fallback)
	}
}

func TestDSRDropsBackendPort(t *testing.T) {
	p := mustPlan(t, "services:\n- {name: d, vip: 10.0.0.1, port: 80, mode: dsr, backends: [{address: 10.0.1.1, port: 80}]}\n")
	if b := p.Services[0].Backends[0]; b.Port != 0 || b.ID() != "10.0.1.1" {
		t.Fatalf("dsr backend %+v id %s", b, b.ID())
	}
}

func TestBuildIsDeterministic(t *testing.T) {
	a := mustPlan(t, service("maglev", 1, 2, 3))
	b := mustPlan(t, service("maglev", 1, 2, 3))
	if !reflect.DeepEqual(a, b) || !Diff(a, b).Empty() {
		t.Fatal("same config, different plans")
	}
}

func TestDiff(t *testing.T) {
	const ebpf = "datapath: ebpf\n"
	old := mustPlan(t, ebpf+service("maglev", 1, 1, 1, 1))
	removed := mustPlan(t, ebpf+service("maglev", 1, 1, 1, 0))
	c := Diff(old, removed)
	if !reflect.DeepEqual(c.Changed, []string{"web"}) || len(c.Added)+len(c.Removed) != 0 {
		t.Fatalf("diff %+v", c)
	}
	if m := c.Moved["web"]; m < 0.24 || m > 0.26 {
		t.Fatalf("weighting 1 of 4 backends to 0 moved %.3f of slots, want ~0.25", m)
	}
	// A compact table (nft: M = 127 for 4 backends) is less close to minimal disruption: a few
	// slots of other backends move too.
	if m := Diff(mustPlan(t, service("maglev", 1, 1, 1, 1)), mustPlan(t, service("maglev", 1, 1, 1, 0))).Moved["web"]; m < 0.24 || m > 0.30 {
		t.Fatalf("nft: weighting 1 of 4 backends to 0 moved %.3f of slots, want 0.25-0.30", m)
	}
	grown := mustPlan(t, ebpf+service("maglev", 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1)) // 11 backends: M 1021 -> 2053
	ten := mustPlan(t, ebpf+service("maglev", 1, 1, 1, 1, 1, 1, 1, 1, 1, 1))
	if m := Diff(ten, grown).Moved["web"]; m < 0.85 || m > 0.95 {
		t.Fatalf("a resized table moved %.3f of new flows, want ~10/11 (a new size re-spreads them)", m)
	}
	c = Diff(nil, old)
	if !reflect.DeepEqual(c.Added, []string{"web"}) {
		t.Fatalf("diff from nothing %+v", c)
	}
	c = Diff(old, &Plan{})
	if !reflect.DeepEqual(c.Removed, []string{"web"}) {
		t.Fatalf("diff to nothing %+v", c)
	}
}

func TestUnavailableBackendLeavesTableKeepsOthersSlots(t *testing.T) {
	y := service("maglev", 1, 1, 1, 1)
	all := mustPlan(t, y).Services[0]
	down := func(_ string, b Backend) bool { return b.Addr.String() != "10.0.1.2" }
	p := mustPlanWith(t, y, down).Services[0]
	if p.Backends[1].Weight != 0 || len(p.Backends) != 4 {
		t.Fatalf("down backend not kept at weight 0: %+v", p.Backends)
	}
	for i, b := range p.Slots {
		if b == 1 {
			t.Fatalf("slot %d still points at the down backend", i)
		}
		if all.Slots[i] != 1 && all.Slots[i] != b {
			t.Fatalf("slot %d moved from backend %d to %d although neither is down", i, all.Slots[i], b)
		}
	}
}

func TestSorryServersOnlyWhenNoBackendIsUp(t *testing.T) {
	y := service("maglev", 1, 1) + "  fallback: sorry\n  sorry_servers:\n  - {address: 10.0.2.1, port: 8080}\n"
	up := mustPlan(t, y).Services[0]
	if len(up.Backends) != 3 || up.Backends[2].Weight != 0 || up.Share()[2] != 0 {
		t.Fatalf("sorry server takes flows while backends are up: %+v", up.Backends)
	}
	none := func(string, Backend) bool { return false }
	p := mustPlanWith(t, y, none).Services[0]
	if share := p.Share(); share[2] != 1 {
		t.Fatalf("sorry server share %v with every backend down", share)
	}
}

func TestBuilderComputesOnlyTheTablesWhoseInputsChanged(t *testing.T) {
	two := "services:\n" +
		"- {name: a, vip: 10.0.0.1, port: 80, backends: [{address: 10.0.1.1}, {address: 10.0.1.2}]}\n" +
		"- {name: b, vip: 10.0.0.2, port: 80, backends: [{address: 10.0.1.1}, {address: 10.0.1.2}]}\n"
	changed := strings.Replace(two, "10.0.1.2}]}\n", "10.0.1.2}, {address: 10.0.1.3}]}\n", 1) // a gets a backend
	parse := func(yaml string) *config.Config {
		cfg, err := config.Parse("test.yaml", []byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	b := NewBuilder()
	build := func(yaml string, available Availability) *Plan {
		p, err := b.Build(parse(yaml), available)
		if err != nil {
			t.Fatal(err)
		}
		if fresh := mustPlanWith(t, yaml, available); !reflect.DeepEqual(p, fresh) {
			t.Fatalf("the Builder's plan differs from Build's")
		}
		return p
	}
	same := func(x, y Service) bool { return &x.Slots[0] == &y.Slots[0] }
	p1 := build(two, nil)
	p2 := build(changed, nil)
	if same(p1.Services[0], p2.Services[0]) || !same(p1.Services[1], p2.Services[1]) {
		t.Error("a's table must be built again, b's reused")
	}
	if p3 := build(two, nil); !same(p1.Services[0], p3.Services[0]) {
		t.Error("going back to the table before must reuse it")
	}
	down := func(_ string, be Backend) bool { return be.Addr.String() != "10.0.1.1" }
	if p4 := build(two, down); same(p1.Services[0], p4.Services[0]) || same(p1.Services[1], p4.Services[1]) {
		t.Error("a backend going down must change both tables")
	}
}
