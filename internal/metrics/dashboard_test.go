package metrics

import (
	"encoding/json"
	"log/slog"
	"os"
	"regexp"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// metricName matches the metric names in PromQL: Sluice's own, the Go runtime's and the process's.
var metricName = regexp.MustCompile(`\b(?:sluice|go|process)_[a-z0-9_]+`)

// TestDashboard checks that the Grafana dashboard decodes and queries only metrics exported here.
func TestDashboard(t *testing.T) {
	data, err := os.ReadFile("../../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct{ Name, Definition string }
		}
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatal(err)
	}
	queries := map[string]string{} // PromQL -> where it is
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, target := range p.Targets {
			queries[target.Expr] = "panel " + p.Title
		}
	}
	variables := map[string]bool{}
	for _, v := range dash.Templating.List {
		variables[v.Name] = true
		queries[v.Definition] = "variable " + v.Name
	}
	for _, name := range []string{"DS_PROMETHEUS", "instance", "service"} {
		if !variables[name] {
			t.Errorf("no template variable %s", name)
		}
	}
	exported := exportedNames(t)
	for query, where := range queries {
		for _, name := range metricName.FindAllString(query, -1) {
			if !exported[name] {
				t.Errorf("%s: %s is not exported", where, name)
			}
		}
	}
}

// exportedNames lists the series names a scrape of a running engine holds, with a conntrack table.
func exportedNames(t *testing.T) map[string]bool {
	m, _, _ := startWith(t, WatchOptions{MaxBackends: DefaultMaxBackends, Conntrack: conntrack{count: 1, max: 2}}, slog.New(slog.DiscardHandler))
	families, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			names[f.GetName()+"_bucket"] = true
			fallthrough
		case dto.MetricType_SUMMARY:
			names[f.GetName()+"_sum"], names[f.GetName()+"_count"] = true, true
		default:
		}
	}
	return names
}
