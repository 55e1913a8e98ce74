package ebpf

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"
)

// TestServiceOnSeveralPorts programs a service on a list of ports (an IPVS fwmark service): a
// vips entry per port, none in the gaps; a change of the list adds and deletes only the ports
// that changed; a restart reads the list back from vips and writes nothing; Status shows it.
func TestServiceOnSeveralPorts(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	service := func(ports, persistence string) string {
		return strings.NewReplacer("PORTS", ports, "PERSISTENCE", persistence).Replace(`
services:
  - name: mail
    vip: 10.91.9.100
    ports: PORTS
    scheduler: rr
    persistence_timeout: PERSISTENCE
    backends:
      - address: 10.91.2.11
      - address: 10.91.2.12
`)
	}
	// reached sends client i's connections to 25, 443 and 8001 and returns the backends they reached.
	reached := func(i int) map[netip.Addr]bool {
		to := map[netip.Addr]bool{}
		for n, port := range []uint16{25, 443, 8001} {
			c := client(i, 47000+uint16(n), false)
			to[destination(t, d, segmentWith(t, c, netip.AddrPortFrom(sessionVIP.Addr(), port), layers.TCP{SYN: true})).Addr()] = true
		}
		return to
	}
	// Without persistence a client's connections to the ports spread (rr alternates).
	r.apply(d, planFromYAML(t, service(`[443, 25, "8000-8002"]`, "0")))
	if to := reached(100); len(to) != 2 {
		t.Errorf("without persistence one client's connections to three ports reached %v, want both backends", to)
	}
	before := planFromYAML(t, service(`[443, 25, "8000-8002"]`, "5m"))
	r.apply(d, before)
	checkMaps(t, d.maps, before)
	// Persistence spans the ports: every client's connections to 25, 443 and 8001 share a backend.
	for i := range 8 {
		if to := reached(i); len(to) != 1 {
			t.Fatalf("client %d reached %v on ports 25, 443 and 8001, want one backend", i, to)
		}
	}
	// A port in a gap is not the service's: the program tracks no flow to it.
	c, gap := client(0, 47100, false), netip.AddrPortFrom(sessionVIP.Addr(), 26)
	runVerdict(t, d, segmentWith(t, c, gap, layers.TCP{SYN: true}))
	var f sluiceFlow
	if d.maps.Flows.Lookup(flowKeyOf(c, gap, unix.IPPROTO_TCP), &f) == nil {
		t.Error("a SYN to port 26, between the service's ports 25 and 443, made a flow")
	}
	after := planFromYAML(t, service(`[25, "8001-8003"]`, "5m"))
	if n := r.apply(d, after); n != 4 { // 443 and 8000 deleted, 8003 added, the record's bounds
		t.Errorf("changing the ports wrote %d entries, want 4", n)
	}
	checkMaps(t, d.maps, after)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	restarted := r.datapath(Options{})
	if n := r.apply(restarted, after); n != 0 {
		t.Errorf("applying the same ports after a restart wrote %d entries", n)
	}
	status, err := restarted.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(status) != 1 || status[0].Ports != "25,8001-8003" {
		t.Fatalf("status %+v, want service mail on ports 25,8001-8003", status)
	}
}
