package plan

import (
	"slices"
	"testing"

	"github.com/sluicelb/sluice/internal/maglev"
)

// TestSharedTableStaysIntact: with maglev.Remember on, services of the same backends share one
// table; handing a down backend's slots to the others in one service leaves the others' table
// as built.
func TestSharedTableStaysIntact(t *testing.T) {
	maglev.Remember(nil)
	t.Cleanup(maglev.Forget)
	yaml := `services:
- {name: a, vip: 10.0.0.1, port: 80, backends: [{address: 10.0.1.1}, {address: 10.0.1.2}]}
- {name: b, vip: 10.0.0.2, port: 80, backends: [{address: 10.0.1.1}, {address: 10.0.1.2}]}
`
	down := func(service string, b Backend) bool { return service != "a" || b.Addr.String() != "10.0.1.1" }
	p := mustPlanWith(t, yaml, down)
	a, b := p.Services[0], p.Services[1]
	if slices.Contains(a.Slots, 0) {
		t.Fatalf("service a still sends slots to its down backend: %v", a.Slots)
	}
	maglev.Forget()
	fresh := mustPlan(t, yaml).Services[1]
	if !slices.Equal(b.Slots, fresh.Slots) {
		t.Errorf("service b's table changed with a's health:\n got %v\nwant %v", b.Slots, fresh.Slots)
	}
}
