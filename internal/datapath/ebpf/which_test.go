package ebpf

import (
	"net/netip"
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
