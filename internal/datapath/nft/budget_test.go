package nft

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/plan"
)

// TestElementsBoundsWhatIsRendered: the estimate is never below what a fresh apply sends (every
// golden case, and a bigger config) with its persistence maps and limit sets full, and not far above it.
func TestElementsBoundsWhatIsRendered(t *testing.T) {
	dirs, _ := filepath.Glob("testdata/golden/*")
	paths := []string{}
	for _, dir := range dirs {
		paths = append(paths, filepath.Join(dir, "config.yaml"))
	}
	paths = append(paths, "testdata/batches/handover-before.yaml", "testdata/batches/handover-after.yaml")
	check := func(name string, p *plan.Plan) {
		st, err := render(p, testEnv)
		if err != nil {
			t.Fatal(err)
		}
		sent := reconcile(newTestTransaction(), newState(), st)
		for _, s := range p.Services {
			if s.Persistence > 0 { // its map, empty when applied, counts as full
				sent += persistenceSize
			}
			if givesSecondChance(&s) { // likewise the second chance map
				sent += len(s.Slots)
			}
			for _, limit := range []struct{ value, size int }{ // likewise the limits' dynamic sets
				{s.Limits.NewConnectionsPerSourcePerSecond, sourceSetSize}, {s.Limits.ConnectionsPerSource, sourceSetSize}, {s.Limits.Connections, connsSetSize},
			} {
				if limit.value > 0 {
					sent += limit.size
				}
			}
		}
		if est := elements(p); est < sent || est > sent+baseOperations+2*len(p.Services) {
			t.Errorf("%s: estimate %d for %d operations sent and persistence maps full", name, est, sent)
		}
	}
	for _, path := range paths {
		check(path, loadPlan(t, path))
	}
	p, err := plan.Build(scaleConfig(300, 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	check("300 services of 10 backends", p)
}

// TestBudgetRefusesWhatIsOverTheLimit names the numbers, the key and the ebpf datapath.
func TestBudgetRefusesWhatIsOverTheLimit(t *testing.T) {
	p, err := plan.Build(scaleConfig(100, 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	d := &Datapath{}
	if err := d.Budget(p); err != nil {
		t.Fatalf("100 services within the default limit: %v", err)
	}
	p.NFTMaxElements = 1024
	err = d.Budget(p)
	var over *datapath.BudgetError
	if !errors.As(err, &over) || over.Limit != 1024 || over.Need != elements(p) || over.Field != "nft.max_elements" {
		t.Fatalf("Budget = %v, want a BudgetError of nft.max_elements", err)
	}
	for _, want := range []string{fmt.Sprint(over.Need), "1024", "nft.max_elements", "datapath: ebpf", "nothing was changed"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
}

// TestKernelApplyRefusesAPlanOverBudget leaves the tables as they were.
func TestKernelApplyRefusesAPlanOverBudget(t *testing.T) {
	inFreshNetns(t, func() {
		ctx := context.Background()
		d := newTestDatapath(t)
		small := loadPlan(t, "testdata/golden/nat-maglev/config.yaml")
		if err := d.Apply(ctx, small); err != nil {
			t.Fatal(err)
		}
		before, err := d.read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cfg := scaleConfig(50, 0)
		cfg.NFT = &config.NFTOptions{MaxElements: config.MinNFTMaxElements}
		big, err := plan.Build(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		var over *datapath.BudgetError
		if err := d.Apply(ctx, big); !errors.As(err, &over) {
			t.Fatalf("Apply over the limit = %v", err)
		}
		after, err := d.read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n := reconcile(newTestTransaction(), before, after); n != 0 {
			t.Errorf("the refused plan changed %d objects", n)
		}
	})
}

// newTestTransaction is a transaction to count operations with.
func newTestTransaction() *knftables.Transaction { return knftables.NewFake("", "").NewTransaction() }
