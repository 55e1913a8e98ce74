package nft

import (
	"context"
	"errors"
	"net/netip"
	"strconv"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/sluicelb/sluice/internal/datapath"
)

func listFlows(t *testing.T, d *Datapath, service string, filter datapath.FlowFilter) datapath.FlowList {
	t.Helper()
	l, err := d.Flows(context.Background(), service, filter)
	if err != nil {
		t.Fatalf("Flows(%s): %v", service, err)
	}
	return l
}

// TestKernelListsNATFlows: Flows lists a nat or fullnat service's conntrack entries, each with
// its client, backend, TCP state and timeout (and under fullnat the masquerading port), within
// the limit and the backend filter.
func TestKernelListsNATFlows(t *testing.T) {
	for _, mode := range []string{"nat", "fullnat"} {
		t.Run(mode, func(t *testing.T) {
			inFreshNetns(t, func() {
				client, d, _, _ := natRig(t, mode)
				held := echoFrom(t, client, "tcp4", "10.91.9.100:80")
				echoFrom(t, client, "tcp4", "10.91.9.100:80").Close()
				echoFrom(t, client, "udp4", "10.91.9.100:53")

				all := listFlows(t, d, "web", datapath.FlowFilter{Limit: 10})
				if all.Total != 2 || len(all.Flows) != 2 {
					t.Fatalf("web flows = %+v, want the held connection and the closed one", all)
				}
				heldAt := netip.MustParseAddrPort(held.LocalAddr().String())
				var found bool
				for _, f := range all.Flows {
					if f.Backend != netip.MustParseAddrPort("10.91.2.11:80") || f.VIP != netip.MustParseAddrPort("10.91.9.100:80") || f.Protocol != "tcp" || f.ExpiresIn == 0 {
						t.Errorf("flow %+v: want tcp 10.91.9.100:80 to 10.91.2.11:80 with a timeout", f)
					}
					if (f.NATPort != 0) != (mode == "fullnat") {
						t.Errorf("flow %+v: a masquerading port only under fullnat", f)
					}
					if f.Client == heldAt {
						found = true
						if f.State != "ESTABLISHED" {
							t.Errorf("the held connection is %s, want ESTABLISHED", f.State)
						}
					} else if f.State == "ESTABLISHED" {
						t.Errorf("the closed connection is ESTABLISHED: %+v", f)
					}
				}
				if !found {
					t.Errorf("the held connection from %s is not listed: %+v", heldAt, all.Flows)
				}
				if cut := listFlows(t, d, "web", datapath.FlowFilter{Limit: 1}); cut.Total != 2 || len(cut.Flows) != 1 {
					t.Errorf("limit 1: %+v, want 1 of 2", cut)
				}
				if other := listFlows(t, d, "web", datapath.FlowFilter{Limit: 10, Backend: backend12}); other.Total != 0 {
					t.Errorf("flows to 10.91.2.12: %+v, want none", other)
				}
				if udp := listFlows(t, d, "dns", datapath.FlowFilter{Limit: 10, Backend: backend11, BackendPort: 53}); udp.Total != 1 || udp.Flows[0].State != "REPLIED" {
					t.Errorf("dns flows = %+v, want the answered one", udp)
				}
				if _, err := d.Flows(context.Background(), "nope", datapath.FlowFilter{Limit: 1}); !errors.Is(err, datapath.ErrNoService) {
					t.Errorf("Flows(nope) = %v, want ErrNoService", err)
				}
			})
		})
	}
}

// TestKernelListsDSRFlows: Flows lists the elements of a dsr service's flow map with the
// backend of their mark and the time left to their timeout.
func TestKernelListsDSRFlows(t *testing.T) {
	inFreshNetns(t, func() {
		d := newTestDatapath(t)
		p := twoBackendPlan("dsr", 0, service("game", "udp", "10.91.9.101", 27000, 27015))
		p.Interfaces = []string{"veth0"}
		apply(t, d, p)
		s := &p.Services[0]
		marks := backendMarks(s.Backends)
		tx := d.nft.NewTransaction()
		for i, key := range [][]string{{"10.91.1.9", "4000", "27001"}, {"10.91.1.8", "4001", "27002"}} {
			tx.Add(&knftables.Element{
				Family: knftables.NetDevFamily, Table: TableName, Map: namesOf(s).flows,
				Key: key, Value: []string{strconv.FormatUint(uint64(marks[i]), 10)},
			})
		}
		if err := d.nft.Run(context.Background(), tx); err != nil {
			t.Fatal(err)
		}
		all := listFlows(t, d, "game", datapath.FlowFilter{Limit: 10})
		want := []datapath.Flow{
			{Protocol: "udp", Client: netip.MustParseAddrPort("10.91.1.8:4001"), VIP: netip.MustParseAddrPort("10.91.9.101:27002"), Backend: netip.MustParseAddrPort("10.91.2.12:27002")},
			{Protocol: "udp", Client: netip.MustParseAddrPort("10.91.1.9:4000"), VIP: netip.MustParseAddrPort("10.91.9.101:27001"), Backend: netip.MustParseAddrPort("10.91.2.11:27001")},
		}
		if all.Total != 2 || len(all.Flows) != 2 {
			t.Fatalf("game flows = %+v, want 2", all)
		}
		for i, f := range all.Flows {
			if f.ExpiresIn == 0 || f.ExpiresIn > uint32(s.FlowTimeout.Seconds()) {
				t.Errorf("flow %+v expires in %d s, want 1..%v", f, f.ExpiresIn, s.FlowTimeout)
			}
			f.ExpiresIn = 0
			if f != want[i] {
				t.Errorf("flow %d = %+v, want %+v", i, f, want[i])
			}
		}
		if one := listFlows(t, d, "game", datapath.FlowFilter{Limit: 10, Backend: backend12}); one.Total != 1 || one.Flows[0].Client.Port() != 4001 {
			t.Errorf("flows to 10.91.2.12: %+v", one)
		}
	})
}
