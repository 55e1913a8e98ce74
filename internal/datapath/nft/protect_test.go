package nft

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/plan"
)

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
