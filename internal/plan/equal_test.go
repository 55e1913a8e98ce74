package plan

import (
	"net/netip"
	"testing"
)

func TestEqual(t *testing.T) {
	base := func() *Plan {
		return &Plan{Datapath: "nft", Services: []Service{{
			Name: "web", VIP: netip.MustParseAddr("10.0.0.1"), Mode: "nat",
			Backends: []Backend{{Addr: netip.MustParseAddr("10.0.1.1"), Weight: 1}},
			Slots:    []int{0, 0, 0},
		}}}
	}
	a := base()
	for _, tt := range []struct {
		name   string
		change func(p *Plan)
		equal  bool
	}{
		{"identical copy", func(*Plan) {}, true},
		{"shared slots", func(p *Plan) { p.Services[0].Slots = a.Services[0].Slots }, true},
		{"a slot", func(p *Plan) { p.Services[0].Slots[2] = 1 }, false},
		{"slot count", func(p *Plan) { p.Services[0].Slots = p.Services[0].Slots[:2] }, false},
		{"a weight", func(p *Plan) { p.Services[0].Backends[0].Weight = 2 }, false},
		{"the mode", func(p *Plan) { p.Services[0].Mode = "dsr" }, false},
		{"the datapath", func(p *Plan) { p.Datapath = "ebpf" }, false},
		{"interfaces", func(p *Plan) { p.Interfaces = []string{"eth0"} }, false},
		{"a service more", func(p *Plan) { p.Services = append(p.Services, Service{Name: "x"}) }, false},
	} {
		b := base()
		tt.change(b)
		if got := a.Equal(b); got != tt.equal {
			t.Errorf("%s: Equal = %v, want %v", tt.name, got, tt.equal)
		}
	}
	var none *Plan
	if !none.Equal(nil) || none.Equal(a) || a.Equal(nil) {
		t.Error("nil plans")
	}
}
