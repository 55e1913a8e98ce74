package cli

import (
	"bytes"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/engine"
)

func TestPrintIPVS(t *testing.T) {
	services := []engine.ServiceView{
		{Protocol: config.ProtocolTCP, VIP: "10.91.9.100", Ports: "80", Mode: config.ModeNAT, Scheduler: config.SchedulerMaglev,
			Backends: []engine.BackendView{{Address: "10.91.2.11", Port: 8080, ProgrammedWeight: 1, Flows: 7, ActiveFlows: 2}}},
		{Protocol: config.ProtocolUDP, VIP: "fd00:91:9::100", Ports: "53", Mode: config.ModeDSR, Scheduler: config.SchedulerWLC,
			Backends: []engine.BackendView{{Address: "fd00:91:2::11", ProgrammedWeight: 0}}},
	}
	var buf bytes.Buffer
	if err := printIPVS(&buf, services); err != nil {
		t.Fatal(err)
	}
	want := `IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
TCP  10.91.9.100:80 mh
  -> 10.91.2.11:8080              Masq    1      2          5
UDP  [fd00:91:9::100]:53 wlc
  -> [fd00:91:2::11]:53           Route   0      0          0
`
	if got := buf.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}
