package split

import (
	"context"
	"testing"

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
