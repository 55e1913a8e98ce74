package testutil

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/plan"
)

// Config parses a YAML config, failing t on an error.
func Config(t testing.TB, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Plan builds the plan of a YAML config with every backend available, failing t on an error.
func Plan(t testing.TB, yaml string) *plan.Plan {
	t.Helper()
	p, err := plan.Build(Config(t, yaml), nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ManyServices is a config of n services s0, s1, … on VIPs of their own (10.100.0.0 up), port
// 80, each over its own backends: backend j of service i is 10.(101+j).(i/256).(i%256).
func ManyServices(n, backends int) string {
	var y strings.Builder
	y.WriteString("services:\n")
	for i := range n {
		fmt.Fprintf(&y, "  - name: s%d\n    vip: 10.%d.%d.%d\n    port: 80\n    backends:\n", i, 100+i/65536, i/256%256, i%256)
		for j := range backends {
			fmt.Fprintf(&y, "      - address: 10.%d.%d.%d\n", 101+j, i/256%256, i%256)
		}
	}
	return y.String()
}
