package api

import (
	"context"
	"reflect"
	"slices"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/engine"
	"github.com/sluicelb/sluice/internal/plan"
)

func TestDryRunChangesNothing(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	before, applies, programmed := f.engine.Config(), f.dp.Applies(), f.dp.Plan()
	api := config.Service{Name: "api", VIP: config.IPOf("192.0.2.20"), Port: config.Range{First: 443, Last: 443},
		Backends: []config.Backend{{Address: config.IPOf("10.0.2.1")}}}
	web := before.Services[0]
	web.Scheduler = "rr"

	changes := map[string]func() (plan.Change, error){
		"add service": func() (plan.Change, error) {
			r, err := f.client.AddService(ctx, api, true)
			return r.Change, err
		},
		"put service": func() (plan.Change, error) {
			r, err := f.client.PutService(ctx, web, true)
			return r.Change, err
		},
		"remove service": func() (plan.Change, error) { return f.client.RemoveService(ctx, "web", true) },
		"add backend": func() (plan.Change, error) {
			r, err := f.client.AddBackend(ctx, "web", config.Backend{Address: config.IPOf("10.0.0.4"), Port: 8080}, true)
			return r.Change, err
		},
		"set weight": func() (plan.Change, error) {
			r, err := f.client.SetWeight(ctx, "web", "10.0.0.1:8080", 7, true)
			return r.Change, err
		},
		"remove backend": func() (plan.Change, error) { return f.client.RemoveBackend(ctx, "web", "10.0.0.3:8080", true) },
		"drain": func() (plan.Change, error) {
			_, change, err := f.client.Drain(ctx, "web", "10.0.0.1:8080", 0, true)
			return change, err
		},
		"put config": func() (plan.Change, error) { return f.client.PutConfig(ctx, []byte("services: []\n"), true) },
		"plan":       func() (plan.Change, error) { return f.client.Plan(ctx, []byte("services: []\n")) },
	}
	results := map[string]plan.Change{}
	for name, dryRun := range changes {
		change, err := dryRun()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if change.Empty() {
			t.Errorf("%s: dry run reports no change", name)
		}
		results[name] = change
	}
	if moved := results["set weight"].Moved["web"]; moved <= 0 {
		t.Errorf("dry run of weight 1 -> 7 moves %v of web's flows, want more than 0", moved)
	}

	if !reflect.DeepEqual(before, f.engine.Config()) {
		t.Error("a dry run changed the running config")
	}
	if f.dp.Applies() != applies || !reflect.DeepEqual(f.dp.Plan(), programmed) {
		t.Error("a dry run reached the datapath")
	}
	if drains := f.engine.Drains(); len(drains) != 0 {
		t.Errorf("a dry run started drains: %+v", drains)
	}
	if slices.ContainsFunc(f.engine.Events(0), func(e engine.Event) bool { return e.Type == engine.EventConfigChanged }) {
		t.Error("a dry run published config_changed")
	}
}
