package ebpf

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/plan"
)

func TestWireEncodings(t *testing.T) {
	if got := wirePort(0x1f90); got != 0x901f {
		t.Errorf("wirePort(8080) = %#x, want the bytes swapped on this little-endian host", got)
	}
	for _, s := range []string{"10.1.2.3", "fd00::1"} {
		a := netip.MustParseAddr(s)
		addr, family := wireAddr(a)
		if got := addrFromWire(addr, family); got != a {
			t.Errorf("%s round-trips to %s", a, got)
		}
	}
	addr, _ := wireAddr(netip.MustParseAddr("10.1.2.3"))
	if addr != [16]byte{10, 1, 2, 3} {
		t.Errorf("IPv4 is laid out as %v", addr)
	}
}

func TestServiceRecordKeys(t *testing.T) {
	s := &plan.Service{
		Name: "web", VIP: netip.MustParseAddr("10.91.9.100"), Ports: config.Range{First: 80, Last: 82},
		Protocol: "udp", Mode: "dsr", Scheduler: "maglev", Fallback: "sorry", FlowTimeout: 90 * time.Second,
	}
	rec, err := serviceRecordOf(s)
	if err != nil {
		t.Fatal(err)
	}
	if rec.name() != "web" || rec.scheduler() != "maglev" || rec.vip() != s.VIP || rec.ports() != s.Ports || rec.FlowTimeout != 90 {
		t.Errorf("record %+v does not read back as the service", rec)
	}
	keys := rec.vipKeys()
	if len(keys) != 3 || wirePort(keys[2].Port) != 82 || keys[0].Proto != 17 {
		t.Fatalf("keys %+v", keys)
	}
	other := keys[0]
	other.Port = wirePort(83)
	if !rec.owns(keys[1]) || rec.owns(other) {
		t.Error("owns is wrong")
	}
	if v := rec.vipValue(7); v.Id != 7 || v.Mode != 3 || v.Fallback != 0 {
		t.Errorf("vips value %+v", v)
	}
	rec.Flags = recordRetired
	if len(rec.vipKeys()) != 3 || !rec.owns(keys[0]) || rec.vipValue(7).Flags != sluiceServiceFlagsSERVICE_RETIRED {
		t.Errorf("a retired record keeps its keys, with value %+v", rec.vipValue(7))
	}
	s.Name = strings.Repeat("x", 33)
	if _, err := serviceRecordOf(s); err == nil {
		t.Error("a name longer than the record's field was accepted")
	}
}

func TestCheckLimits(t *testing.T) {
	p := &plan.Plan{Services: []plan.Service{{Ports: config.Range{First: 1, Last: 10}, Slots: make([]int, 7)}}}
	if err := checkLimits(p, limits{vips: 10, services: 1, backends: 0, slots: 7}); err != nil {
		t.Errorf("a plan that fits: %v", err)
	}
	if err := checkLimits(p, limits{vips: 10, services: 1, backends: 0, slots: 6}); err == nil || !strings.Contains(err.Error(), "needs 7 Maglev slots") {
		t.Errorf("a plan with too many slots: %v", err)
	}
}
