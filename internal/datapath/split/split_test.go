package split

import (
	"context"
	"maps"
	"net/netip"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/datapath/fake"
	"github.com/sluicelb/sluice/internal/plan"
	"github.com/sluicelb/sluice/internal/testutil"
)

const twoServices = `
services:
  - name: guarded
    vip: 10.91.9.100
    port: 80
    syn_protection: true
    backends:
      - address: 10.91.2.11
  - name: plain
    vip: 10.91.9.100
    port: 81
    backends:
      - address: 10.91.2.11
`

func names(p *plan.Plan) []string {
	if p == nil {
		return nil
	}
	var out []string
	for _, s := range p.Services {
		out = append(out, s.Name)
	}
	return out
}

func TestServicesGoWhereTheyAreSelected(t *testing.T) {
	ctx := context.Background()
	first, second := fake.New(), fake.New()
	d := New(first, second, func(s *plan.Service) bool { return s.SYNProtection })
	p := testutil.Plan(t, twoServices)
	if err := d.Apply(ctx, p); err != nil {
		t.Fatal(err)
	}
	if got := names(first.Plan()); len(got) != 1 || got[0] != "plain" {
		t.Errorf("the first datapath holds %v, want [plain]", got)
	}
	if got := names(second.Plan()); len(got) != 1 || got[0] != "guarded" {
		t.Errorf("the second datapath holds %v, want [guarded]", got)
	}
	st, err := d.Status(ctx)
	if err != nil || len(st) != 2 || st[0].Name != "guarded" || st[1].Name != "plain" {
		t.Fatalf("status %+v, %v: want both services, by name", st, err)
	}
	// Flows are reset where the service lives.
	g := p.Services[0]
	if _, err := d.ResetFlows(ctx, &g, g.Backends[0]); err != nil {
		t.Fatal(err)
	}
	if got := second.Resets(); len(got) != 1 || first.Resets() != nil {
		t.Errorf("resets: first %v, second %v; want the guarded service's in the second", first.Resets(), got)
	}
	// Without a selected service the second datapath is emptied.
	p.Services = p.Services[1:]
	if err := d.Apply(ctx, p); err != nil {
		t.Fatal(err)
	}
	if second.Plan() != nil {
		t.Errorf("the second datapath still holds %v with no service selected", names(second.Plan()))
	}
	if err := d.Flush(ctx); err != nil || first.Plan() != nil {
		t.Errorf("flush: %v, first still holds %v", err, names(first.Plan()))
	}
}

// replicator is a fake datapath that replicates the flows of one listener port.
type replicator struct {
	*fake.Datapath
	port  uint16
	flows []datapath.ReplicatedFlow
	told  int // ReplicatedUntil calls
}

func (r *replicator) WatchFlows(_ context.Context, emit func([]datapath.ReplicatedFlow)) error {
	emit(r.flows)
	return nil
}

func (r *replicator) SnapshotFlows(_ context.Context, fn func(datapath.ReplicatedFlow) bool) error {
	for _, f := range r.flows {
		if !fn(f) {
			return nil
		}
	}
	return nil
}

func (r *replicator) ImportFlows(_ context.Context, flows []datapath.ReplicatedFlow) (datapath.ImportResult, error) {
	res := datapath.ImportResult{Skipped: map[string]int{}}
	for _, f := range flows {
		switch {
		case f.Listener.Port() != r.port:
			res.Skipped["no such service"]++
		case f.Closing:
			res.Skipped["no such backend"]++
		default:
			res.Imported++
		}
	}
	return res, nil
}

// LostFlows answers its listener port, so that a sum shows which datapaths were asked.
func (r *replicator) LostFlows(context.Context) (uint64, error) { return uint64(r.port), nil }

// ReplicatedUntil records that it was told.
func (r *replicator) ReplicatedUntil(context.Context, time.Time) error {
	r.told++
	return nil
}

// TestFlowsReplicateWhereTheirServiceIs: each replicating datapath takes the flows of its own
// services, and a flow is of no service only when neither holds it; a datapath that does not
// replicate is left out; snapshots and watches cover both.
func TestFlowsReplicateWhereTheirServiceIs(t *testing.T) {
	ctx := context.Background()
	flow := func(port uint16, closing bool) datapath.ReplicatedFlow {
		return datapath.ReplicatedFlow{Listener: netip.AddrPortFrom(netip.MustParseAddr("10.91.9.100"), port), Closing: closing}
	}
	a := &replicator{Datapath: fake.New(), port: 80, flows: []datapath.ReplicatedFlow{flow(80, false)}}
	b := &replicator{Datapath: fake.New(), port: 81, flows: []datapath.ReplicatedFlow{flow(81, false), flow(81, true)}}
	batch := []datapath.ReplicatedFlow{flow(80, false), flow(81, false), flow(81, true), flow(82, false)}
	for _, c := range []struct {
		name          string
		d             *Datapath
		imported, got int
		skipped       map[string]int
		lost          uint64
		told          int
	}{
		{"both", New(a, b, nil), 2, 3, map[string]int{"no such service": 1, "no such backend": 1}, 80 + 81, 2},
		{"the first", New(a, fake.New(), nil), 1, 1, map[string]int{"no such service": 3}, 80, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, err := c.d.ImportFlows(ctx, batch)
			if err != nil || res.Imported != c.imported || !maps.Equal(res.Skipped, c.skipped) {
				t.Errorf("ImportFlows = %+v, %v; want %d imported, %v skipped", res, err, c.imported, c.skipped)
			}
			listed := 0
			if err := c.d.SnapshotFlows(ctx, func(datapath.ReplicatedFlow) bool { listed++; return true }); err != nil || listed != c.got {
				t.Errorf("SnapshotFlows listed %d (%v), want %d", listed, err, c.got)
			}
			listed = 0
			if err := c.d.SnapshotFlows(ctx, func(datapath.ReplicatedFlow) bool { listed++; return false }); err != nil || listed != 1 {
				t.Errorf("SnapshotFlows after fn said stop listed %d (%v), want 1", listed, err)
			}
			emitted := 0
			if err := c.d.WatchFlows(ctx, func(b []datapath.ReplicatedFlow) { emitted += len(b) }); err != nil || emitted != c.got {
				t.Errorf("WatchFlows emitted %d (%v), want %d", emitted, err, c.got)
			}
			if lost, err := c.d.LostFlows(ctx); err != nil || lost != c.lost {
				t.Errorf("LostFlows = %d, %v; want %d", lost, err, c.lost)
			}
			before := a.told + b.told
			if err := c.d.ReplicatedUntil(ctx, time.Now()); err != nil || a.told+b.told-before != c.told {
				t.Errorf("ReplicatedUntil told %d datapaths (%v), want %d", a.told+b.told-before, err, c.told)
			}
		})
	}
	if _, err := New(fake.New(), fake.New(), nil).ImportFlows(ctx, batch); err == nil {
		t.Error("ImportFlows without a replicating datapath did not fail")
	}
}
