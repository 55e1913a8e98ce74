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
		Name: "web", VIP: netip.MustParseAddr("10.91.9.100"), Ports: config.PortList{{First: 80, Last: 82}, {First: 443, Last: 443}},
		Protocol: "udp", Mode: "dsr", Scheduler: "maglev", Fallback: "sorry", FlowTimeout: 90 * time.Second,
	}
	rec, err := serviceRecordOf(s)
	if err != nil {
		t.Fatal(err)
	}
	if rec.name() != "web" || rec.scheduler() != "maglev" || rec.vip() != s.VIP || rec.PortFirst != 80 || rec.PortLast != 443 || rec.FlowTimeout != 90 {
		t.Errorf("record %+v does not read back as the service", rec)
	}
	keys := rec.vipKeys(s.Ports)
	if len(keys) != 4 || wirePort(keys[2].Port) != 82 || wirePort(keys[3].Port) != 443 || keys[0].Proto != 17 {
		t.Fatalf("keys %+v", keys)
	}
	other := keys[0]
	other.Port = wirePort(83) // within the bounds, not one of the ports
	if !rec.owns(keys[1], s.Ports) || !rec.owns(keys[3], s.Ports) || rec.owns(other, s.Ports) {
		t.Error("owns is wrong")
	}
	st := newState(limits{})
	st.addService("web", &serviceState{id: 7, rec: rec})
	for _, k := range keys {
		st.vips[k] = sluiceService{Id: 7}
	}
	st.vips[other] = sluiceService{Id: 8}
	if readPorts(st); st.services["web"].ports.String() != "80-82,443" {
		t.Errorf("ports read back from vips: %s, want 80-82,443", st.services["web"].ports)
	}
	if v := rec.vipValue(7); v.Id != 7 || v.Mode != 3 || v.Fallback != 0 {
		t.Errorf("vips value %+v", v)
	}
	rec.Flags = recordRetired
	if len(rec.vipKeys(s.Ports)) != 4 || !rec.owns(keys[0], s.Ports) || rec.vipValue(7).Flags != sluiceServiceFlagsSERVICE_RETIRED {
		t.Errorf("a retired record keeps its keys, with value %+v", rec.vipValue(7))
	}
	s.Name = strings.Repeat("x", 33)
	if _, err := serviceRecordOf(s); err == nil {
		t.Error("a name longer than the record's field was accepted")
	}
}

func TestCheckLimits(t *testing.T) {
	p := &plan.Plan{Services: []plan.Service{{Ports: config.PortList{{First: 1, Last: 10}}, Slots: make([]int, 7)}}}
	if err := checkLimits(p, limits{vips: 10, services: 1, backends: 0, slots: 7}); err != nil {
		t.Errorf("a plan that fits: %v", err)
	}
	if err := checkLimits(p, limits{vips: 10, services: 1, backends: 0, slots: 6}); err == nil || !strings.Contains(err.Error(), "needs 7 Maglev slots") {
		t.Errorf("a plan with too many slots: %v", err)
	}
}
