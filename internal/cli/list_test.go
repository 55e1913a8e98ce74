package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/engine"
)

func listFixture() []engine.ServiceView {
	return []engine.ServiceView{
		{Name: "web", Protocol: "tcp", VIP: config.IPOf("10.91.9.100"), Ports: "80", Mode: "nat", Scheduler: "maglev", Fallback: "drop", Programmed: true, Slots: 65537,
			Backends: []engine.BackendView{
				{ID: "10.91.2.10", Address: "10.91.2.10", Weight: 1, ProgrammedWeight: 1, Health: "up", State: "active", Share: 0.5, Flows: 12, ActiveFlows: 3, Packets: count(120), Bytes: count(9000)},
				{ID: "10.91.2.11:8080", Address: "10.91.2.11", Port: 8080, Weight: 1, ProgrammedWeight: 0, Health: "down", State: "down"}, // packets not counted
			}},
		{Name: "dns6", Protocol: "udp", VIP: config.IPOf("fd00:91:9::100"), Ports: "5300-5310", Mode: "dsr", Scheduler: "hash", Slots: 0},
	}
}

func TestListTable(t *testing.T) {
	var out bytes.Buffer
	if err := printTable(&out, listFixture(), map[string]string{"80/tcp": "http"}, false); err != nil {
		t.Fatal(err)
	}
	want := "" +
		"Prot LocalAddress:Port           Name    Scheduler  Mode   Slots\n" +
		"  -> RemoteAddress:Port          Weight  State      Share  ActiveConn  Conns  InPkts  InBytes\n" +
		"TCP  10.91.9.100:http            web     maglev     nat    65537\n" +
		"  -> 10.91.2.10:http             1       active     50.0%  3           12     120     9000\n" +
		"  -> 10.91.2.11:8080             1       down       0.0%   0           0      -       -\n" + // packets not counted
		"UDP  [fd00:91:9::100]:5300-5310  dns6    hash       dsr    0\n"
	if out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out.String(), want)
	}
	assertNoTrailingSpace(t, out.String())
}

// TestListTellsWhatWasNotForwarded: a service whose packets the datapath could not forward gets a
// line below the table saying how many and why, naming the sysctl; the columns stay as they were.
func TestListTellsWhatWasNotForwarded(t *testing.T) {
	services := listFixture()
	services[0].Unforwarded = datapath.Unforwarded{ForwardingDisabled: 40, NoRoute: 2}
	var out bytes.Buffer
	if err := printTable(&out, services, nil, false); err != nil {
		t.Fatal(err)
	}
	want := "" +
		"  -> 10.91.2.11:8080             1       down       0.0%   0           0      -       -\n" +
		"UDP  [fd00:91:9::100]:5300-5310  dns6    hash       dsr    0\n" +
		"!! web: dropped, not forwarded: 40 forwarding disabled (sysctl net.ipv4.ip_forward / net.ipv6.conf.all.forwarding, or the interface's forwarding), 2 no route to the next hop\n"
	if !strings.HasSuffix(out.String(), want) {
		t.Fatalf("got\n%s\nwant it to hold\n%s", out.String(), want)
	}
	assertNoTrailingSpace(t, out.String())
}

func TestListWide(t *testing.T) {
	var out bytes.Buffer
	if err := printTable(&out, listFixture(), nil, true); err != nil {
		t.Fatal(err)
	}
	assertNoTrailingSpace(t, out.String())
	for _, want := range []string{"Fallback", "Programmed", "Health", "drop", "  -> 10.91.2.11:8080"} {
		if !bytes.Contains(out.Bytes(), []byte(want)) {
			t.Errorf("wide listing lacks %q:\n%s", want, out.String())
		}
	}
}

func TestListFilter(t *testing.T) {
	for what, want := range map[string]string{"web": "web", "10.91.9.100:80": "web", "[fd00:91:9::100]:5305": "dns6"} {
		got, err := filterServices(listFixture(), what)
		if err != nil || len(got) != 1 || got[0].Name != want {
			t.Errorf("%s: %+v, %v; want %s", what, got, err, want)
		}
	}
	for _, what := range []string{"nope", "10.91.9.100:81", "[fd00:91:9::100]:5311"} {
		if got, err := filterServices(listFixture(), what); err == nil {
			t.Errorf("%s: %+v, want an error", what, got)
		}
	}
}
