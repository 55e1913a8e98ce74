package cli

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/engine"
)

func TestServiceRates(t *testing.T) {
	before := []engine.ServiceView{{Name: "web", Backends: []engine.BackendView{
		{ID: "10.0.0.1:80", Flows: 10, Packets: count(100), Bytes: count(10000)},
		{ID: "10.0.0.2:80", Flows: 50, Packets: count(500), Bytes: count(50000)},
	}}}
	after := []engine.ServiceView{{Name: "web", Protocol: "tcp", VIP: config.IPOf("192.0.2.1"), Ports: "80", Backends: []engine.BackendView{
		{ID: "10.0.0.1:80", Address: "10.0.0.1", Port: 80, Flows: 30, Packets: count(300), Bytes: count(30000)},
		{ID: "10.0.0.2:80", Address: "10.0.0.2", Port: 80, Flows: 4, Packets: count(40), Bytes: count(4000)}, // reset: from zero
		{ID: "10.0.0.3:80", Address: "10.0.0.3", Port: 80, Flows: 2, Packets: count(2), Bytes: count(200)},   // new
	}}}
	got := serviceRates(before, after, 2*time.Second)
	want := []Rates{rates(10, 100, 10000), rates(2, 20, 2000), rates(1, 1, 100)}
	for i, b := range got[0].Backends {
		if !reflect.DeepEqual(b.Rates, want[i]) {
			t.Errorf("backend %s = %s, want %s", b.ID, b.Rates, want[i])
		}
	}
	if sum := rates(13, 121, 12100); !reflect.DeepEqual(got[0].Rates, sum) {
		t.Errorf("service = %s, want %s", got[0].Rates, sum)
	}
	if r := perSecond(1, 2, 0); r != 0 {
		t.Errorf("perSecond over no time = %v", r)
	}

	var out bytes.Buffer
	if err := printRates(&out, got); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.HasSuffix(line, " ") {
			t.Errorf("line ends in a space: %q", line)
		}
	}
	if !strings.Contains(out.String(), "TCP  192.0.2.1:80") || !strings.Contains(out.String(), "  -> 10.0.0.1:80") || !strings.Contains(out.String(), "10000") {
		t.Errorf("rates table:\n%s", out.String())
	}
}

// TestServiceRatesUncounted: backends whose packets the datapath does not count (nft nat with
// nft.packet_counters false) have no packet rates, and neither has their service; the table
// shows "-" for them, not a rate of 0.
func TestServiceRatesUncounted(t *testing.T) {
	before := []engine.ServiceView{{Name: "web", Backends: []engine.BackendView{{ID: "10.0.0.1:80", Flows: 10}}}}
	after := []engine.ServiceView{{Name: "web", Protocol: "tcp", VIP: config.IPOf("192.0.2.1"), Ports: "80", Backends: []engine.BackendView{
		{ID: "10.0.0.1:80", Address: "10.0.0.1", Port: 80, Flows: 30},
	}}}
	got := serviceRates(before, after, 2*time.Second)
	if want := (Rates{CPS: 10}); !reflect.DeepEqual(got[0].Rates, want) || !reflect.DeepEqual(got[0].Backends[0].Rates, want) {
		t.Errorf("rates = %s and %s, want %s", got[0].Rates, got[0].Backends[0].Rates, want)
	}
	var out bytes.Buffer
	if err := printRates(&out, got); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "\n  -> 10.0.0.1:80") || !strings.HasSuffix(out.String(), " 10   -      -\n") {
		t.Errorf("rates table:\n%s", out.String())
	}
}

// count is a counted value.
func count(n uint64) *uint64 { return &n }

// rates are counted rates.
func rates(cps, pps, bps float64) Rates { return Rates{CPS: cps, InPPS: &pps, InBPS: &bps} }

// String shows the rates' values rather than their pointers.
func (r Rates) String() string {
	return fmt.Sprintf("{cps %v pps %s bps %s}", r.CPS, optionalRate(r.InPPS), optionalRate(r.InBPS))
}
