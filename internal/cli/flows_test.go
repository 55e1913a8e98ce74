package cli

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/sluicelb/sluice/internal/datapath"
)

func TestPrintFlows(t *testing.T) {
	list := datapath.FlowList{Total: 3, Flows: []datapath.Flow{
		{Protocol: "tcp", Client: netip.MustParseAddrPort("10.91.1.2:40000"), VIP: netip.MustParseAddrPort("10.91.9.100:80"), Backend: netip.MustParseAddrPort("10.91.2.11:80"), State: "ESTABLISHED", ExpiresIn: 431999, NATPort: 61000},
		{Protocol: "udp", Client: netip.MustParseAddrPort("[fd00:91:1::2]:5353"), VIP: netip.MustParseAddrPort("[fd00:91:9::100]:53"), Backend: netip.MustParseAddrPort("[fd00:91:2::11]:53"), ExpiresIn: 59},
	}}
	var out bytes.Buffer
	if err := printFlows(&out, list); err != nil {
		t.Fatal(err)
	}
	want := `Pro  Client               VIP                  Backend             State        Expires    NATPort
TCP  10.91.1.2:40000      10.91.9.100:80       10.91.2.11:80       ESTABLISHED  119:59:59  61000
UDP  [fd00:91:1::2]:5353  [fd00:91:9::100]:53  [fd00:91:2::11]:53  -            00:59      -
... 1 more (--limit)
`
	if out.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestFlowFilterFlags(t *testing.T) {
	for _, c := range []struct {
		backend string
		limit   int
		ok      bool
	}{{"", 1000, true}, {"10.0.0.1", 1, true}, {"10.0.0.1:80", 5, true}, {"[fd00::1]:80", 5, true}, {"fd00::1", 5, true},
		{"10.0.0", 5, false}, {"", 0, false}, {"", datapath.MaxFlowLimit + 1, false}} {
		if _, err := datapath.ParseFlowFilter(c.backend, c.limit); (err == nil) != c.ok {
			t.Errorf("ParseFlowFilter(%q, %d) = %v, want ok %v", c.backend, c.limit, err, c.ok)
		}
	}
}
