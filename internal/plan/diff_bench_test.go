package plan

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/maglev"
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

// BenchmarkBuild10kServices is the plan `sluice apply -f` or `plan -f` builds of a balancer of
// 10,000 services of two backends each, in a process of its own (issue 32).
func BenchmarkBuild10kServices(b *testing.B) {
	cfg := bigConfig(b, "nft")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := NewBuilder().Build(cfg, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBuild10kServicesRemembered is that build on ebpf (tables of 1021 slots) with the
// tables of the last apply handed to maglev.Remember, as apply -f and plan -f do.
func BenchmarkBuild10kServicesRemembered(b *testing.B) {
	cfg := bigConfig(b, "ebpf")
	maglev.Remember(nil)
	b.Cleanup(maglev.Forget)
	if _, err := NewBuilder().Build(cfg, nil); err != nil {
		b.Fatal(err)
	}
	tables := maglev.Remembered()
	b.ReportAllocs()
	for b.Loop() {
		maglev.Remember(tables)
		if _, err := NewBuilder().Build(cfg, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// bigConfig is a config of 10,000 services of two backends each on datapath.
func bigConfig(b *testing.B, datapath string) *config.Config {
	var text strings.Builder
	text.WriteString("datapath: " + datapath + "\nservices:\n")
	for i := range 10000 {
		fmt.Fprintf(&text, "- {name: svc%d, vip: 10.92.%d.%d, port: 80, backends: [{address: 10.91.2.100, port: 8080}, {address: 10.91.2.101, port: 8080}]}\n", i, i/256, i%256)
	}
	cfg, err := config.Parse("big.yaml", []byte(text.String()))
	if err != nil {
		b.Fatal(err)
	}
	return cfg
}
