package nft

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/plan"
)

// TestKernelDSRFlowsIPv6 sends two UDP flows (three datagrams, then one) to an IPv6 dsr service:
// its flow map, keyed by a hash of the flow (dsrFlowKey), remembers each flow at its first
// datagram, so the backend counts two new flows of four packets; Which and Flows find both, and
// ResetFlows forgets them.
func TestKernelDSRFlowsIPv6(t *testing.T) {
	inFreshNetns(t, func() {
		veth1, _ := netlink.LinkByName("veth1")
		vip := netip.MustParseAddr("fd00:91:9::101")
		client, _ := netlink.ParseAddr("fd00:91:1::2/64")
		client.Flags = unix.IFA_F_NODAD // usable at once
		if err := netlink.AddrAdd(veth1, client); err != nil {
			t.Fatal(err)
		}
		reachVIPAtVeth0(t, vip)
		d := newTestDatapath(t)
		p := twoBackendPlan("dsr", 0, service("game6", "udp", vip.String(), 27000, 27015))
		s := &p.Services[0]
		s.Backends = []plan.Backend{{Addr: netip.MustParseAddr("fd00:91:2::11"), Weight: 1}, {Addr: netip.MustParseAddr("fd00:91:2::12")}}
		p.Interfaces = []string{"veth0"}
		apply(t, d, p)

		var sources []netip.AddrPort
		for i, datagrams := range []int{3, 1} {
			c, err := net.Dial("udp6", netip.AddrPortFrom(vip, uint16(27000+i)).String())
			if err != nil {
				t.Fatal(err)
			}
			for range datagrams {
				if _, err := c.Write([]byte("ping")); err != nil {
					t.Fatal(err)
				}
			}
			sources = append(sources, netip.MustParseAddrPort(c.LocalAddr().String()))
			c.Close()
		}
		got := waitFor(t, d, "game6", "fd00:91:2::11", func(b datapath.BackendStatus) bool { return deref(b.Packets) >= 4 })
		if got.Flows != 2 || deref(got.Packets) != 4 || got.ActiveFlows != 2 {
			t.Errorf("backend fd00:91:2::11 = %+v, want 2 flows, 4 packets, 2 active", got)
		}
		for i, src := range sources {
			to := netip.AddrPortFrom(vip, uint16(27000+i))
			c, err := d.Which("udp", to, src)
			if err != nil || !c.Tracked || c.Backend.Addr() != s.Backends[0].Addr {
				t.Errorf("Which(%s -> %s) = %+v, %v; want the remembered flow to fd00:91:2::11", src, to, c, err)
			}
		}
		list, err := d.Flows(context.Background(), "game6", datapath.FlowFilter{Limit: 10})
		if err != nil || list.Total != 2 || len(list.Flows) != 2 || list.Flows[0].Backend.Addr() != s.Backends[0].Addr {
			t.Errorf("Flows = %+v, %v; want the two flows to fd00:91:2::11", list, err)
		}
		if n, err := d.ResetFlows(context.Background(), s, s.Backends[0]); err != nil || n != 2 {
			t.Errorf("ResetFlows dropped %d flows (%v), want 2", n, err)
		}
	})
}
