package engine

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
)

// BenchmarkUpdateOneBackend measures what the engine does for one added backend (copy, mutate,
// validate, plan before and after, diff) with 1 to 10,000 other services of 10 backends each; the
// datapath is a fake. A dry run, so that every iteration makes the same change.
func BenchmarkUpdateOneBackend(b *testing.B) {
	for _, n := range []int{1, 1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			h := start(b, manyServices(n, 10), Options{})
			add := func(cfg *config.Config) error {
				s := &cfg.Services[len(cfg.Services)-1]
				s.Backends = append(s.Backends, config.Backend{Address: "10.200.0.1"})
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

// manyServices is a config of n services on VIPs of their own, each over its own backends.
func manyServices(n, backends int) string {
	var y strings.Builder
	y.WriteString("services:\n")
	for i := range n {
		fmt.Fprintf(&y, "  - name: s%d\n    vip: 10.100.%d.%d\n    port: 80\n    backends:\n", i, i>>8, i&255)
		for j := range backends {
			fmt.Fprintf(&y, "      - address: 10.%d.%d.%d\n", 101+j, i>>8, i&255)
		}
	}
	return y.String()
}
