package plan

import (
	"net/netip"
	"testing"
)

// TestTunnelReachesThePlan: a tunnel service's encapsulation, GUE port and outer source reach the
// plan, defaults filled in, and its backends take the client's port as dsr's do.
func TestTunnelReachesThePlan(t *testing.T) {
	p := mustPlan(t, `datapath: ebpf
services:
- {name: a, vip: 10.0.0.1, port: 80, mode: tunnel, backends: [{address: 10.9.0.1, port: 80}]}
- {name: b, vip: 10.0.0.1, port: 53, protocol: udp, mode: tunnel, tunnel: gue, tunnel_source: 10.0.0.2, backends: [{address: 10.9.0.1}]}
- {name: c, vip: 10.0.0.1, port: 81, mode: dsr, backends: [{address: 10.9.0.1}]}
`)
	want := []Tunnel{
		{Kind: "ipip"},
		{Kind: "gue", GUEPort: 6080, Source: netip.MustParseAddr("10.0.0.2")},
		{},
	}
	for i, w := range want {
		if got := p.Services[i].Tunnel; got != w {
			t.Errorf("%s: tunnel %+v, want %+v", p.Services[i].Name, got, w)
		}
	}
	if port := p.Services[0].Backends[0].Port; port != 0 {
		t.Errorf("tunnel backend port %d, want 0 (the client's)", port)
	}
	if got := want[1].String(); got != "gue:6080 from 10.0.0.2" {
		t.Errorf("String() = %q", got)
	}
}
