package ebpf

import (
	"context"
	"errors"
	"math"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/datapath"
)

// TestFlowsListsAServicesFlows reads the flow table through a Datapath that only opened the pins
// (as `sluice flows` does without a daemon): the service's flows only, with their backend, state
// and time left, within the limit and the backend filter.
func TestFlowsListsAServicesFlows(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	r.apply(d, planFromYAML(t, twoServices))
	ids := idsOf(t, d)
	web, b11, b12 := ids.of(t, "web"), ids.of(t, "web/10.91.2.11:8080"), ids.of(t, "web/10.91.2.12:8080")
	now := monotonicNow()
	flowAt(t, d.maps, 1, web, b11, now)
	flowAt(t, d.maps, 2, web, b11, idleLastSeen(t))
	flowAt(t, d.maps, 3, web, b12, now)
	closing := flowKeyOf(netip.MustParseAddrPort("10.91.1.4:40004"), netip.MustParseAddrPort("10.91.9.100:80"), unix.IPPROTO_TCP)
	if err := d.maps.Flows.Put(closing, sluiceFlow{BackendId: b12, ServiceId: web, LastSeen: now, Flags: sluiceFlowFlagsFLOW_CLOSING}); err != nil {
		t.Fatal(err)
	}
	web6 := ids.of(t, "web6")
	other := flowKeyOf(netip.MustParseAddrPort("[fd00:91:1::2]:40000"), netip.MustParseAddrPort("[fd00:91:9::100]:8001"), unix.IPPROTO_TCP)
	if err := d.maps.Flows.Put(other, sluiceFlow{BackendId: ids.of(t, "web6/fd00:91:2::11"), ServiceId: web6, LastSeen: now, NatPort: wirePort(33000)}); err != nil {
		t.Fatal(err)
	}

	lister := r.datapath(Options{})
	list, err := lister.Flows(context.Background(), "web", datapath.FlowFilter{Limit: 10})
	if err != nil || list.Total != 4 || len(list.Flows) != 4 {
		t.Fatalf("Flows(web) = %+v, %v; want 4 flows", list, err)
	}
	vip := netip.MustParseAddrPort("10.91.9.100:80")
	for i, want := range []struct {
		backend string
		state   string
	}{{"10.91.2.11:8080", "ACTIVE"}, {"10.91.2.11:8080", "IDLE"}, {"10.91.2.12:8080", "ACTIVE"}, {"10.91.2.12:8080", "CLOSING"}} {
		f := list.Flows[i]
		client := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 91, 1, byte(i + 1)}), uint16(40001+i))
		if f.Client != client || f.VIP != vip || f.Protocol != "tcp" || f.Backend.String() != want.backend || f.State != want.state || f.NATPort != 0 {
			t.Errorf("flow %d = %+v, want %s to %s, %s", i, f, client, want.backend, want.state)
		}
		if active := want.state == "ACTIVE"; active != (f.ExpiresIn > 0) || f.ExpiresIn > uint32(testFlowTimeout/time.Second) {
			t.Errorf("flow %d (%s) expires in %d s, want 1..%v only when active", i, f.State, f.ExpiresIn, testFlowTimeout)
		}
	}
	if cut, err := lister.Flows(context.Background(), "web", datapath.FlowFilter{Limit: 1, Backend: netip.MustParseAddr("10.91.2.12"), BackendPort: 8080}); err != nil || cut.Total != 2 || len(cut.Flows) != 1 {
		t.Errorf("limit 1 of 10.91.2.12:8080 = %+v, %v; want 1 of 2", cut, err)
	}
	if six, err := lister.Flows(context.Background(), "web6", datapath.FlowFilter{Limit: 10}); err != nil || six.Total != 1 || six.Flows[0].NATPort != 33000 || six.Flows[0].Backend.String() != "[fd00:91:2::11]:8001" {
		t.Errorf("Flows(web6) = %+v, %v; want the fullnat flow to [fd00:91:2::11]:8001 by port 33000", six, err)
	}
	if _, err := lister.Flows(context.Background(), "nope", datapath.FlowFilter{Limit: 1}); !errors.Is(err, datapath.ErrNoService) {
		t.Errorf("Flows(nope) = %v, want ErrNoService", err)
	}
}

// TestFlowLeftNeverWraps: the time a flow has left is right whatever the clock reads, including
// a flow stamped after the clock was read and a machine up for less than the timeout.
func TestFlowLeftNeverWraps(t *testing.T) {
	sec := uint64(time.Second)
	for _, c := range []struct{ lastSeen, now, timeout, want uint64 }{
		{100 * sec, 100 * sec, 10 * sec, 10 * sec},
		{100 * sec, 104 * sec, 10 * sec, 6 * sec},
		{100 * sec, 110 * sec, 10 * sec, 0},
		{100 * sec, 99 * sec, 10 * sec, 10 * sec}, // stamped after the clock read
		{0, 3 * sec, 300 * sec, 297 * sec},        // a machine up 3 s
		{math.MaxUint64 - 1, math.MaxUint64, 10, 9},
		{0, math.MaxUint64, 10 * sec, 0},
	} {
		if got := flowLeft(c.lastSeen, c.now, c.timeout); got != c.want {
			t.Errorf("flowLeft(%d, %d, %d) = %d, want %d", c.lastSeen, c.now, c.timeout, got, c.want)
		}
	}
	if got := roundUpSeconds(sec + 1); got != 2 {
		t.Errorf("roundUpSeconds(1s+1ns) = %d, want 2", got)
	}
	if got := roundUpSeconds(math.MaxUint64); got != math.MaxUint32 {
		t.Errorf("roundUpSeconds(max) = %d, want it saturated", got)
	}
}
