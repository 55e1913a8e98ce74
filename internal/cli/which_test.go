package cli

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/sluicelb/sluice/internal/datapath"
)

// TestWhichPrintsADrop: a flow the access lists drop is printed as dropped, naming the list,
// never with a backend; another with its backend.
func TestWhichPrintsADrop(t *testing.T) {
	src, vip := netip.MustParseAddrPort("10.0.0.5:40000"), netip.MustParseAddrPort("10.91.9.100:80")
	for _, tc := range []struct {
		c    datapath.Choice
		want string
	}{
		{datapath.Choice{Service: "web", Mode: "nat", Dropped: "source_deny 10.0.0.0/8"},
			"10.0.0.5:40000 -> 10.91.9.100:80/tcp: dropped: source_deny 10.0.0.0/8 (service web, nat, new flow)\n"},
		{datapath.Choice{Service: "web", Mode: "dsr", Dropped: "not in source_allow"},
			"10.0.0.5:40000 -> 10.91.9.100:80/tcp: dropped: not in source_allow (service web, dsr, new flow)\n"},
		{datapath.Choice{Service: "web", Mode: "nat", Backend: netip.MustParseAddrPort("10.91.2.11:80")},
			"10.0.0.5:40000 -> 10.91.9.100:80/tcp: backend 10.91.2.11:80 (service web, nat, new flow, Maglev pick)\n"},
	} {
		var out bytes.Buffer
		printChoice(&out, src, vip, "tcp", tc.c)
		if out.String() != tc.want {
			t.Errorf("printChoice(%+v) = %q, want %q", tc.c, out.String(), tc.want)
		}
	}
}
