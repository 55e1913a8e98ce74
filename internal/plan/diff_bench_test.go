package plan

import (
	"net/netip"
	"strconv"
	"testing"
)

// BenchmarkDiff10kServices is the diff of `sluice apply -f` or `plan -f` on a balancer of 10,000
// services where one backend was added (issue 32).
func BenchmarkDiff10kServices(b *testing.B) {
	old, changed := &Plan{Datapath: "nft"}, &Plan{Datapath: "nft"}
	slots := []int{0, 1, 0, 1, 0, 1, 0}
	for i := range 10000 {
		s := Service{
			Name: "svc" + strconv.Itoa(i), VIP: netip.AddrFrom4([4]byte{10, 92, byte(i >> 8), byte(i)}), Protocol: "tcp",
			Mode: "nat", Scheduler: "maglev", Fallback: "drop",
			Backends: []Backend{{Addr: netip.MustParseAddr("10.91.2.100"), Port: 8080, Weight: 1},
				{Addr: netip.MustParseAddr("10.91.2.101"), Port: 8080, Weight: 1}},
			Slots: slots,
		}
		old.Services = append(old.Services, s)
		s.Backends = append([]Backend(nil), s.Backends...)
		changed.Services = append(changed.Services, s)
	}
	last := &changed.Services[len(changed.Services)-1]
	last.Backends = append(last.Backends, Backend{Addr: netip.MustParseAddr("10.91.2.102"), Port: 8080, Weight: 1})
	last.Slots = []int{0, 1, 2, 0, 1, 2, 0}
	b.ReportAllocs()
	for b.Loop() {
		if c := Diff(old, changed); len(c.Changed) != 1 {
			b.Fatalf("changed %v, want 1", c.Changed)
		}
	}
}
