package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/engine"
)

func TestServiceRates(t *testing.T) {
	before := []engine.ServiceView{{Name: "web", Backends: []engine.BackendView{
		{ID: "10.0.0.1:80", Flows: 10, Packets: 100, Bytes: 10000},
		{ID: "10.0.0.2:80", Flows: 50, Packets: 500, Bytes: 50000},
	}}}
	after := []engine.ServiceView{{Name: "web", Protocol: "tcp", VIP: config.IPOf("192.0.2.1"), Ports: "80", Backends: []engine.BackendView{
		{ID: "10.0.0.1:80", Address: "10.0.0.1", Port: 80, Flows: 30, Packets: 300, Bytes: 30000},
		{ID: "10.0.0.2:80", Address: "10.0.0.2", Port: 80, Flows: 4, Packets: 40, Bytes: 4000}, // reset: from zero
		{ID: "10.0.0.3:80", Address: "10.0.0.3", Port: 80, Flows: 2, Packets: 2, Bytes: 200},   // new
	}}}
	got := serviceRates(before, after, 2*time.Second)
	want := []Rates{{10, 100, 10000}, {2, 20, 2000}, {1, 1, 100}}
	for i, b := range got[0].Backends {
		if b.Rates != want[i] {
			t.Errorf("backend %s = %+v, want %+v", b.ID, b.Rates, want[i])
		}
	}
	if sum := (Rates{13, 121, 12100}); got[0].Rates != sum {
		t.Errorf("service = %+v, want %+v", got[0].Rates, sum)
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
