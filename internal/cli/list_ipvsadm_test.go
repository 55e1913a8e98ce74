package cli

import (
	"bytes"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/engine"
)

func TestPrintIPVS(t *testing.T) {
	services := []engine.ServiceView{
		{Protocol: config.ProtocolTCP, VIP: config.IPOf("10.91.9.100"), Ports: "80", Mode: config.ModeNAT, Scheduler: config.SchedulerMaglev,
			Backends: []engine.BackendView{{Address: "10.91.2.11", Port: 8080, ProgrammedWeight: 1, Flows: 7, ActiveFlows: 2}}},
		{Protocol: config.ProtocolUDP, VIP: config.IPOf("fd00:91:9::100"), Ports: "53", Mode: config.ModeDSR, Scheduler: config.SchedulerWLC,
			Backends: []engine.BackendView{{Address: "fd00:91:2::11", ProgrammedWeight: 0}}},
		{Protocol: config.ProtocolTCP, VIP: config.IPOf("10.91.9.100"), Ports: "81", Mode: config.ModeNAT, Scheduler: config.SchedulerSH,
			SHPort: true, PersistenceTimeout: config.DurationOf("300s"), PersistencePrefix: 32},
		{Protocol: config.ProtocolTCP, VIP: config.IPOf("10.91.9.100"), Ports: "82", Mode: config.ModeNAT, Scheduler: config.SchedulerRR,
			PersistenceTimeout: config.DurationOf("1h0m0s"), PersistencePrefix: 24},
		{Protocol: config.ProtocolTCP, VIP: config.IPOf("fd00:91:9::100"), Ports: "83", Mode: config.ModeNAT, Scheduler: config.SchedulerSH,
			PersistenceTimeout: config.DurationOf("60s"), PersistencePrefix: 64},
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
TCP  10.91.9.100:81 sh (sh-port) persistent 300
TCP  10.91.9.100:82 rr persistent 3600 mask 255.255.255.0
TCP  [fd00:91:9::100]:83 sh persistent 60 mask 64
`
	if got := buf.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}
