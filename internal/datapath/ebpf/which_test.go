package ebpf

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
)

// TestWhichCountsNothing: under tc and XDP, Which leaves every service and backend counter as it
// was, for a new flow and a tracked one, while the attached program run on the same packet
// counts it.
func TestWhichCountsNothing(t *testing.T) {
	for _, mode := range []AttachMode{AttachTC, AttachXDP} {
		t.Run(string(mode), func(t *testing.T) {
			r := newRig(t)
			d := r.datapath(Options{Attach: mode})
			r.apply(d, planFromYAML(t, manyServices(2, 1)))
			vip, src := netip.MustParseAddrPort("10.91.9.100:1000"), netip.MustParseAddrPort("10.91.1.2:40000")
			m, err := d.pinnedMaps()
			if err != nil || m == nil {
				t.Fatalf("pinned maps: %v", err)
			}
			before := countersOf(t, m)
			c, err := d.Which("tcp", vip, src)
			if err != nil || c.Tracked || !c.Backend.IsValid() {
				t.Fatalf("Which of a new flow: %+v, %v", c, err)
			}
			if after := countersOf(t, m); after != before {
				t.Fatalf("Which of a new flow changed the counters: %+v, then %+v", before, after)
			}

			// The attached program counts the same packet, and tracks its flow.
			prog, err := d.attachedProgram()
			if err != nil {
				t.Fatal(err)
			}
			defer prog.Close()
			packet, err := syntheticPacket(wireProtocols["tcp"], src, vip)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := prog.Run(&ebpf.RunOptions{Data: packet, DataOut: make([]byte, len(packet)+256)}); err != nil {
				t.Fatal(err)
			}
			counted := countersOf(t, m)
			if counted.packets != before.packets+2 || counted.flows != before.flows+2 {
				t.Fatalf("the attached program counted %+v after %+v; want a packet and a flow for the service and the backend", counted, before)
			}
			if tracked, err := d.Which("tcp", vip, src); err != nil || !tracked.Tracked || tracked.Backend != c.Backend {
				t.Fatalf("Which of the tracked flow: %+v, %v; want it tracked on %s", tracked, err, c.Backend)
			}
			if after := countersOf(t, m); after != counted {
				t.Fatalf("Which of a tracked flow changed the counters: %+v, then %+v", counted, after)
			}
		})
	}
}

// counters are the sums of every service's and backend's counters.
type counters struct{ packets, bytes, flows uint64 }

func countersOf(t *testing.T, m *kernelMaps) counters {
	t.Helper()
	var sum counters
	for _, x := range []*ebpf.Map{m.ServiceStats, m.BackendStats} {
		for id := range x.MaxEntries() {
			s, err := sumStats(x, id)
			if err != nil {
				t.Fatal(err)
			}
			sum.packets += s.Packets
			sum.bytes += s.Bytes
			sum.flows += s.Flows
		}
	}
	return sum
}

// accessListed is a service with both access lists: new flows from 10.91.0.0/16 only, none from
// 10.91.1.0/24 (nor its 10.91.1.3/32, inside it).
const accessListed = `services:
  - name: web
    vip: 10.91.9.100
    port: 80
    source_allow: [10.91.0.0/16]
    source_deny: [10.91.1.3/32, 10.91.1.0/24]
    backends: [{address: 10.91.2.11}]
`

// TestWhichSaysWhatTheAccessListsDrop: the program run on a new flow of a client its access
// lists refuse tracks nothing, and Which names the list (and the deny prefix) instead of a
// backend; an allowed client gets one, and a flow tracked before its client was denied keeps its
// backend, as the program keeps it.
func TestWhichSaysWhatTheAccessListsDrop(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{Attach: AttachTC})
	vip, held := netip.MustParseAddrPort("10.91.9.100:80"), netip.MustParseAddrPort("10.91.1.9:40000")
	r.apply(d, planFromYAML(t, strings.Replace(accessListed, "source_deny: [10.91.1.3/32, 10.91.1.0/24]", "source_deny: [10.91.1.3/32]", 1)))
	prog, err := d.attachedProgram()
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	packet, err := syntheticPacket(wireProtocols["tcp"], held, vip)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := prog.Run(&ebpf.RunOptions{Data: packet, DataOut: make([]byte, len(packet)+256)}); err != nil {
		t.Fatal(err)
	}
	r.apply(d, planFromYAML(t, accessListed))
	for _, c := range []struct{ src, dropped string }{
		{"10.91.1.3:40000", "source_deny 10.91.1.0/24"},
		{"10.91.1.200:40000", "source_deny 10.91.1.0/24"},
		{"10.92.0.1:40000", "not in source_allow"},
		{"10.91.2.1:40000", ""},
	} {
		got, err := d.Which("tcp", vip, netip.MustParseAddrPort(c.src))
		switch {
		case err != nil:
			t.Errorf("Which(%s): %v", c.src, err)
		case got.Dropped != c.dropped || got.Backend.IsValid() == (c.dropped != "") || got.Service != "web":
			t.Errorf("Which(%s) = %+v, want service web, dropped %q", c.src, got, c.dropped)
		}
	}
	if got, err := d.Which("tcp", vip, held); err != nil || !got.Tracked || got.Dropped != "" || !got.Backend.IsValid() {
		t.Errorf("Which of a flow tracked before its client was denied = %+v, %v; want it tracked on its backend", got, err)
	}
}
