package cli

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/datapath"
)

func TestPrintFlows(t *testing.T) {
	list := datapath.FlowList{Total: 4, Flows: []datapath.Flow{
		{Protocol: "tcp", Client: netip.MustParseAddrPort("10.91.1.2:40000"), VIP: netip.MustParseAddrPort("10.91.9.100:80"), Backend: netip.MustParseAddrPort("10.91.2.11:80"), State: "ESTABLISHED", ExpiresIn: 431999, NATPort: 61000},
		{Protocol: "udp", Client: netip.MustParseAddrPort("[fd00:91:1::2]:5353"), VIP: netip.MustParseAddrPort("[fd00:91:9::100]:53"), Backend: netip.MustParseAddrPort("[fd00:91:2::11]:53"), ExpiresIn: 59},
		// nft dsr over IPv6 keeps a hash of the flow: its client and port are not known.
		{Protocol: "tcp", VIP: netip.MustParseAddrPort("[fd00:91:9::101]:0"), Backend: netip.MustParseAddrPort("[fd00:91:2::11]:0"), ExpiresIn: 300},
	}}
	var out bytes.Buffer
	if err := printFlows(&out, list); err != nil {
		t.Fatal(err)
	}
	want := `Pro  Client               VIP                  Backend             State        Expires    NATPort
TCP  10.91.1.2:40000      10.91.9.100:80       10.91.2.11:80       ESTABLISHED  119:59:59  61000
UDP  [fd00:91:1::2]:5353  [fd00:91:9::100]:53  [fd00:91:2::11]:53  -            00:59      -
TCP  -                    fd00:91:9::101       fd00:91:2::11       -            05:00      -
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

// TestFlowsRefusesABackendNotOfTheService: `flows --backend` of an address (or a port) that is no
// backend of the service is an error naming both; a backend of it is not refused.
func TestFlowsRefusesABackendNotOfTheService(t *testing.T) {
	url, _ := changeDaemon(t)
	for _, backend := range []string{"10.0.0.9", "10.0.0.1:81"} {
		_, err := sluiceCLI(t, "", "--api", url, "flows", "web", "--backend", backend)
		if err == nil || !strings.Contains(err.Error(), "--backend "+backend+": not a backend of service web") {
			t.Errorf("flows web --backend %s: %v, want it refused as not a backend of web", backend, err)
		}
	}
	for _, backend := range []string{"10.0.0.1", "10.0.0.2:8080"} {
		if _, err := sluiceCLI(t, "", "--api", url, "flows", "web", "--backend", backend); err != nil && strings.Contains(err.Error(), "not a backend") {
			t.Errorf("flows web --backend %s: %v", backend, err)
		}
	}
	if err := checkMember("web", datapath.FlowFilter{Backend: netip.MustParseAddr("10.0.0.1"), BackendPort: 80},
		func() ([]backendAt, error) { return []backendAt{{"10.0.0.1", 0}}, nil }); err != nil {
		t.Errorf("a backend that takes the client's port refused for port 80: %v", err)
	}
}
