package ebpf

import (
	"context"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/sluicelb/sluice/internal/datapath"
)

// TestApplyProgramsTunnels: a tunnel service's vips entries say MODE_TUNNEL and its
// service_tunnels entry holds its kind, GUE port and outer source (of the backends' family, not
// the VIP's, for c), its status the counters of tunnel_stats; a change of those is written.
func TestApplyProgramsTunnels(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	const yaml = `datapath: ebpf
services:
- {name: a, vip: 10.1.0.1, port: 80, mode: tunnel, backends: [{address: 10.2.0.1}]}
- {name: b, vip: 10.1.0.1, port: 53, protocol: udp, mode: tunnel, tunnel: gue, gue_port: 7000, tunnel_source: 10.1.0.2, backends: [{address: 10.2.0.1}]}
- {name: c, vip: "fd00:1::1", port: 80, mode: tunnel, tunnel_source: 10.1.0.2, backends: [{address: 10.2.0.1}]}
`
	r.apply(d, planFromYAML(t, yaml))
	src, _ := wireAddr(netip.MustParseAddr("10.1.0.2"))
	want := map[string]sluiceTunnel{
		"a": {Kind: sluiceTunnelKindTUNNEL_IPIP},
		"b": {Kind: sluiceTunnelKindTUNNEL_GUE, GuePort: wirePort(7000), Src: src},
		"c": {Kind: sluiceTunnelKindTUNNEL_IPIP, Src: src}, // an IPv6 VIP over an IPv4 backend
	}
	check := func() {
		t.Helper()
		for name, w := range want {
			s := d.state.services[name]
			var got sluiceTunnel
			if err := d.maps.ServiceTunnels.Lookup(s.id, &got); err != nil || got != w {
				t.Errorf("%s: service_tunnels %+v (%v), want %+v", name, got, err, w)
			}
			var v sluiceService
			if err := d.maps.Vips.Lookup(s.rec.vipKeys(s.ports)[0], &v); err != nil || v.Mode != sluiceModeMODE_TUNNEL {
				t.Errorf("%s: vips entry %+v (%v), want mode tunnel", name, v, err)
			}
		}
	}
	check()
	perCPU := make([]sluiceTunnelCounts, ebpf.MustPossibleCPU())
	perCPU[0] = sluiceTunnelCounts{Encapsulated: 5, TooBig: 2, NoSource: 1}
	if err := d.maps.TunnelStats.Put(d.state.services["a"].id, perCPU); err != nil {
		t.Fatal(err)
	}
	if st, ok, err := d.ServiceStatus(context.Background(), "a"); err != nil || !ok || st.Tunnel != (datapath.TunnelCounts{Encapsulated: 5, TooBig: 2, NoSource: 1}) {
		t.Errorf("status %+v (%v, %v), want the tunnel counters", st.Tunnel, ok, err)
	}
	r.apply(d, planFromYAML(t, `datapath: ebpf
services:
- {name: a, vip: 10.1.0.1, port: 80, mode: tunnel, tunnel: gue, backends: [{address: 10.2.0.1}]}
- {name: b, vip: 10.1.0.1, port: 53, protocol: udp, mode: tunnel, tunnel: gue, gue_port: 7000, tunnel_source: 10.1.0.2, backends: [{address: 10.2.0.1}]}
- {name: c, vip: "fd00:1::1", port: 80, mode: tunnel, tunnel_source: 10.1.0.2, backends: [{address: 10.2.0.1}]}
`))
	want["a"] = sluiceTunnel{Kind: sluiceTunnelKindTUNNEL_GUE, GuePort: wirePort(6080)}
	check()
}
