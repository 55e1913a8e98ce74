package engine

import (
	"fmt"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/testutil"
)

// BenchmarkUpdateOneBackend measures what the engine does for one added backend (copy, mutate,
// validate, plan before and after, diff) with 1 to 10,000 other services of 10 backends each; the
// datapath is a fake. A dry run, so that every iteration makes the same change.
func BenchmarkUpdateOneBackend(b *testing.B) {
	for _, n := range []int{1, 1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			h := start(b, testutil.ManyServices(n, 10), Options{})
			add := func(cfg *config.Config) error {
				s := &cfg.Services[len(cfg.Services)-1]
				s.Backends = append(s.Backends, config.Backend{Address: config.IPOf("10.200.0.1")})
				return nil
			}
			b.ResetTimer()
			for b.Loop() {
				if _, err := h.Update(true, "bench", add); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
