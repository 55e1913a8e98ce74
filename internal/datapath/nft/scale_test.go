package nft

import (
	"fmt"
	"net/netip"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/plan"
)

// scaleConfig is n services of 10 backends each (maglev), the last one with extra backends more.
func scaleConfig(n, extra int) *config.Config {
	cfg := &config.Config{Datapath: "nft"}
	for i := range n {
		s := config.Service{
			Name: fmt.Sprintf("svc%d", i), VIP: config.IPFrom(netip.AddrFrom4([4]byte{10, 92, byte(i >> 8), byte(i)})),
			Port: config.Range{First: 80, Last: 80}, Protocol: "tcp", Mode: "nat", Scheduler: "maglev",
		}
		backends := 10
		if i == n-1 {
			backends += extra
		}
		for j := range backends {
			s.Backends = append(s.Backends, config.Backend{Address: config.IPOf(fmt.Sprintf("10.91.2.%d", 100+j)), Port: 8080})
		}
		cfg.Services = append(cfg.Services, s)
	}
	return cfg
}

// BenchmarkApplyOneBackend measures what Apply computes in Go to add one backend to one service,
// comparing with the committed state: it should not grow with the number of services.
func BenchmarkApplyOneBackend(b *testing.B) {
	for _, n := range []int{10, 100, 1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			builder := plan.NewBuilder()
			plans := make([]*plan.Plan, 2)
			for extra := range plans {
				p, err := builder.Build(scaleConfig(n, extra), nil)
				if err != nil {
					b.Fatal(err)
				}
				plans[extra] = p
			}
			committed, err := renderPlan(plans[0], testEnv, nil, false)
			if err != nil {
				b.Fatal(err)
			}
			committed.release()
			fake := knftables.NewFake("", "")
			b.ResetTimer()
			for range b.N {
				next, err := renderPlan(plans[1], testEnv, committed, false)
				if err != nil {
					b.Fatal(err)
				}
				have, want, err := committed.changes(next)
				if err != nil {
					b.Fatal(err)
				}
				if reconcile(fake.NewTransaction(), have, want) == 0 {
					b.Fatal("no change")
				}
			}
		})
	}
}
