package plan

import (
	"reflect"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
)

// TestDiffSaysWhatChanges: each service's changed settings, backends added, removed and
// re-weighted, and health checks, which the plans do not hold.
func TestDiffSaysWhatChanges(t *testing.T) {
	const before = `
services:
- {name: web, vip: 10.0.0.1, port: 80, health_check: {type: tcp},
   backends: [{address: 10.0.1.1, port: 80}, {address: 10.0.1.2, port: 80}, {address: 10.0.1.3, port: 80}]}
- {name: dns, vip: 10.0.0.1, port: 53, protocol: udp, backends: [{address: 10.0.1.1}]}
- {name: old, vip: 10.0.0.2, port: 80, backends: [{address: 10.0.1.1}]}
`
	const after = `
services:
- {name: web, vip: 10.0.0.1, port: 80, mode: fullnat, health_check: {type: http, path: /healthz},
   backends: [{address: 10.0.1.1, port: 80, weight: 2}, {address: 10.0.1.2, port: 80}, {address: 10.0.1.4, port: 80}]}
- {name: dns, vip: 10.0.0.1, port: 53, protocol: udp, health_check: {type: udp, send: ping}, backends: [{address: 10.0.1.1}]}
- {name: new, vip: 10.0.0.3, port: 443, backends: [{address: 10.0.1.1}]}
`
	oldCfg, newCfg := mustConfig(t, before), mustConfig(t, after)
	newPlan := mustBuild(t, newCfg)
	c := Diff(mustBuild(t, oldCfg), newPlan)
	c.NoteHealthChecks(oldCfg, newCfg, newPlan)
	if !reflect.DeepEqual(c.Added, []string{"new"}) || !reflect.DeepEqual(c.Removed, []string{"old"}) || !reflect.DeepEqual(c.Changed, []string{"web", "dns"}) {
		t.Fatalf("added %v removed %v changed %v", c.Added, c.Removed, c.Changed)
	}
	want := []ServiceChange{
		{Name: "new", Op: OpAdd, Listener: "tcp 10.0.0.3:443", Backends: []BackendChange{{Backend: "10.0.1.1", Op: OpAdd, To: 1}}},
		{Name: "web", Op: OpChange, Listener: "tcp 10.0.0.1:80", Moved: c.Moved["web"],
			Fields: []FieldChange{{"mode", "nat", "fullnat"}, {"health_check", `{"type":"tcp","rise":2,"fall":3,"on_failure":"inhibit"}`,
				`{"type":"http","rise":2,"fall":3,"on_failure":"inhibit","method":"GET","path":"/healthz"}`}},
			Backends: []BackendChange{
				{Backend: "10.0.1.1:80", Op: OpChange, From: 1, To: 2},
				{Backend: "10.0.1.4:80", Op: OpAdd, To: 1},
				{Backend: "10.0.1.3:80", Op: OpRemove, From: 1},
			}},
		{Name: "old", Op: OpRemove, Listener: "tcp 10.0.0.2:80", Backends: []BackendChange{{Backend: "10.0.1.1", Op: OpRemove, From: 1}}},
		{Name: "dns", Op: OpChange, Listener: "udp 10.0.0.1:53", Fields: []FieldChange{{"health_check", "none", `{"type":"udp","rise":2,"fall":3,"on_failure":"inhibit","send":"ping"}`}}},
	}
	if !reflect.DeepEqual(c.Services, want) {
		t.Fatalf("services:\n got %+v\nwant %+v", c.Services, want)
	}
	if c.Moved["web"] <= 0 || c.Moved["dns"] != 0 {
		t.Fatalf("moved %v", c.Moved)
	}
	if c := Diff(newPlan, newPlan); !c.Empty() || len(c.Services) != 0 {
		t.Fatalf("a plan against itself: %+v", c)
	}
}

func mustConfig(t *testing.T, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func mustBuild(t *testing.T, cfg *config.Config) *Plan {
	t.Helper()
	p, err := Build(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDiffWritesLimitsReadably: a limits change names each limit set, with its unit, and leaves
// out those not set (not "0/s per source, 5 0 per source").
func TestDiffWritesLimitsReadably(t *testing.T) {
	const before = `
services:
- {name: web, vip: 10.0.0.1, port: 80, backends: [{address: 10.0.1.1}]}
`
	for _, tc := range []struct{ limits, want string }{
		{"{new_connections_per_second: 100}", "100 new connections/s; over them: drop"},
		{"{connections_per_source: 5}", "5 connections per source; over them: drop"},
		{"{new_connections_per_source_per_second: 10, connections: 1000}, limit_action: reset",
			"10 new connections/s per source, 1000 connections; over them: reset"},
	} {
		after := strings.Replace(before, "port: 80,", "port: 80, limits: "+tc.limits+",", 1)
		c := Diff(mustBuild(t, mustConfig(t, before)), mustBuild(t, mustConfig(t, after)))
		want := []FieldChange{{"limits", "none", tc.want}}
		if len(c.Services) != 1 || !reflect.DeepEqual(c.Services[0].Fields, want) {
			t.Errorf("limits %s: %+v, want %+v", tc.limits, c.Services, want)
		}
	}
}
