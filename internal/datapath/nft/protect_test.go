package nft

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/plan"
)

// TestGoldenProtection renders the protection stage alone of each golden config that protects a
// service: the synproxy's chains and maps, the services' sets, counters and synproxy elements (as
// a knftables fake dumps them), then the rules with which each service's chain judges new flows;
// and compares it with protection.nft.
func TestGoldenProtection(t *testing.T) {
	dirs, _ := filepath.Glob("testdata/golden/*")
	cases := 0
	for _, dir := range dirs {
		p := loadPlan(t, filepath.Join(dir, "config.yaml"))
		if !slices.ContainsFunc(p.Services, protects) {
			continue
		}
		cases++
		t.Run(filepath.Base(dir), func(t *testing.T) {
			st := newState()
			renderProtectionBase(st, p, sharedUseOf(p))
			var guards strings.Builder
			for i := range p.Services {
				s := &p.Services[i]
				part := newState()
				guard, err := renderProtection(part, s)
				if err != nil {
					t.Fatal(err)
				}
				st.tables[familyOf(s)] = true
				st.include(part)
				for _, rule := range guard {
					fmt.Fprintf(&guards, "# %s judges new flows: %s\n", s.Name, rule)
				}
			}
			fake := knftables.NewFake("", "")
			tx := fake.NewTransaction()
			reconcile(tx, newState(), st)
			if err := fake.Run(context.Background(), tx); err != nil {
				t.Fatalf("transaction rejected by the fake: %v", err)
			}
			compareGolden(t, filepath.Join(dir, "protection.nft"), fake.Dump()+guards.String())
		})
	}
	if cases == 0 {
		t.Fatal("no golden config protects a service")
	}
}

// protects tells whether a service has an access list, a limit or syn_protection.
func protects(s plan.Service) bool {
	return len(s.SourceAllow) > 0 || len(s.SourceDeny) > 0 || s.Limits != (config.Limits{}) || s.SYNProtection
}

// TestRenderRefusesWhatTheModeCannotProtect: connection counts need conntrack, which dsr's netdev
// chains have not; so does the synproxy, for tcp only. The error names the service and the keys.
func TestRenderRefusesWhatTheModeCannotProtect(t *testing.T) {
	for _, tc := range []struct {
		s    plan.Service
		want string
	}{
		{plan.Service{Name: "a", Mode: config.ModeDSR, Limits: config.Limits{Connections: 10}}, "connections_per_source"},
		{plan.Service{Name: "b", Mode: config.ModeDSR, Limits: config.Limits{ConnectionsPerSource: 10}}, "connections_per_source"},
		{plan.Service{Name: "c", Mode: config.ModeNAT, Protocol: config.ProtocolUDP, SYNProtection: true}, "syn_protection"},
	} {
		_, err := renderService(&tc.s, testEnv)
		if err == nil || !strings.Contains(err.Error(), "service "+tc.s.Name) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("rendering %s: %v; want an error naming it and %s", tc.s.Name, err, tc.want)
		}
	}
}

// TestOutermostDropsCoveredPrefixes: an interval set refuses overlapping elements; a prefix that
// another covers adds nothing.
func TestOutermostDropsCoveredPrefixes(t *testing.T) {
	var in []netip.Prefix
	for _, p := range []string{"10.0.0.0/8", "10.1.0.0/16", "10.1.2.3/32", "11.0.0.0/24", "11.0.0.0/25", "11.0.1.0/24", "192.0.2.0/24"} {
		in = append(in, netip.MustParsePrefix(p))
	}
	got := outermost(in)
	want := []netip.Prefix{in[0], in[3], in[5], in[6]}
	if !slices.Equal(got, want) {
		t.Errorf("outermost = %v, want %v", got, want)
	}
}
