package nft

import (
	"context"
	"flag"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/sluicelb/sluice/internal/plan"
)

var update = flag.Bool("update", false, "rewrite golden files")

// testEnv stands in for the host: DSR arrives on eth0, backends are behind eth1.
var testEnv = Environment{
	DSRDevices: []string{"eth0"},
	DeviceTo:   func(netip.Addr) (string, error) { return "eth1", nil },
}

func renderFile(t *testing.T, path string) *state {
	t.Helper()
	st, err := render(loadPlan(t, path), testEnv)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func compareGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs (go test -update rewrites it):\n--- got ---\n%s", path, got)
	}
}

// TestGoldenRulesets renders each testdata/golden/<case>/config.yaml from an empty kernel and
// compares the resulting tables (as a knftables fake dumps them) with ruleset.nft.
func TestGoldenRulesets(t *testing.T) {
	dirs, _ := filepath.Glob("testdata/golden/*")
	if len(dirs) == 0 {
		t.Fatal("no golden cases")
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			fake := knftables.NewFake("", "")
			tx := fake.NewTransaction()
			reconcile(tx, newState(), renderFile(t, filepath.Join(dir, "config.yaml")))
			if err := fake.Run(context.Background(), tx); err != nil {
				t.Fatalf("transaction rejected by the fake: %v", err)
			}
			compareGolden(t, filepath.Join(dir, "ruleset.nft"), fake.Dump())
		})
	}
}

// TestTransitions checks that a change produces exactly the transaction in tx.nft: only what
// differs, in an order nft accepts, and nothing when applied twice; and that comparing with the
// committed state, rendering only the changed services, produces the same transaction.
func TestTransitions(t *testing.T) {
	dirs, _ := filepath.Glob("testdata/transitions/*")
	if len(dirs) == 0 {
		t.Fatal("no transition cases")
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			before := renderFile(t, filepath.Join(dir, "before.yaml"))
			after := renderFile(t, filepath.Join(dir, "after.yaml"))
			fake := knftables.NewFake("", "")
			setup := fake.NewTransaction()
			reconcile(setup, newState(), renderFile(t, filepath.Join(dir, "before.yaml"))) // the fake keeps what it is given
			if err := fake.Run(context.Background(), setup); err != nil {
				t.Fatal(err)
			}
			tx := fake.NewTransaction()
			reconcile(tx, before, after)
			if err := fake.Run(context.Background(), tx); err != nil {
				t.Fatalf("transition rejected by the fake: %v\n%s", err, tx)
			}
			compareGolden(t, filepath.Join(dir, "tx.nft"), tx.String())
			if incremental := incrementalTransaction(t, fake, dir); incremental != tx.String() {
				t.Errorf("comparing with the committed state gives another transaction:\n%s\n---\n%s", incremental, tx)
			}

			fresh := knftables.NewFake("", "")
			full := fresh.NewTransaction()
			reconcile(full, newState(), renderFile(t, filepath.Join(dir, "after.yaml")))
			if err := fresh.Run(context.Background(), full); err != nil {
				t.Fatal(err)
			}
			if got, want := sortedLines(fake.Dump()), sortedLines(fresh.Dump()); got != want {
				t.Errorf("incremental result differs from a fresh apply:\n%s\n---\n%s", got, want)
			}
			if n := reconcile(fake.NewTransaction(), after, after); n != 0 {
				t.Errorf("applying the same plan again costs %d operations, want 0", n)
			}
		})
	}
}

// incrementalTransaction renders before.yaml, then after.yaml reusing its unchanged services, and
// returns the transaction between what changed. Services whose plan did not change must not be
// rendered again.
func incrementalTransaction(t *testing.T, nft knftables.Interface, dir string) string {
	t.Helper()
	before, err := renderPlan(loadPlan(t, filepath.Join(dir, "before.yaml")), testEnv, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	afterPlan := loadPlan(t, filepath.Join(dir, "after.yaml"))
	after, err := renderPlan(afterPlan, testEnv, before, false)
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range after.services {
		if old := before.services[name]; old != nil && reflect.DeepEqual(old.service, s.service) && old != s {
			t.Errorf("service %s did not change but was rendered again", name)
		}
	}
	before.release()
	tx := nft.NewTransaction()
	have, want, err := before.changes(after)
	if err != nil {
		t.Fatal(err)
	}
	reconcile(tx, have, want)
	return tx.String()
}

// sortedLines compares dumps regardless of element order (the fake keeps insertion order).
func sortedLines(dump string) string {
	lines := slices.DeleteFunc(strings.Split(dump, "\n"), isSecondChanceElement)
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// isSecondChanceElement tells whether a dump's line is an element of a prev map: Apply's record
// of a change (secondchance.go), which a fresh apply of the same plan has no reason to hold.
func isSecondChanceElement(line string) bool {
	f := strings.Fields(line)
	return len(f) > 4 && f[0] == "add" && f[1] == "element" && isServiceObject(f[4], prevMap)
}

// TestRecheckRoutesRendersOnlyMovedServices renders a dsr and a nat service, then again with
// recheckRoutes: both are reused while the route to the dsr backends leads out of the same device,
// and only the dsr service is rendered again once it leads out of another.
func TestRecheckRoutesRendersOnlyMovedServices(t *testing.T) {
	p := loadPlan(t, "testdata/golden/dsr-range-udp/config.yaml")
	p.Services = append(p.Services, loadPlan(t, "testdata/golden/nat-maglev/config.yaml").Services...)
	dev := "eth1"
	env := Environment{DSRDevices: []string{"eth0"}, DeviceTo: func(netip.Addr) (string, error) { return dev, nil }}
	first, err := renderPlan(p, env, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	reused := func(next *desired) map[string]bool {
		out := map[string]bool{}
		for name, s := range next.services {
			out[name] = s == first.services[name]
		}
		return out
	}
	for _, tc := range []struct {
		dev     string
		recheck bool
		game    bool // the dsr service reused
	}{{"eth1", true, true}, {"eth2", false, true}, {"eth2", true, false}} {
		dev = tc.dev
		next, err := renderPlan(p, env, first, tc.recheck)
		if err != nil {
			t.Fatal(err)
		}
		got := reused(next)
		if len(got) < 2 || got["game"] != tc.game {
			t.Errorf("route via %s, recheck %v: reused %v, want game reused %v", tc.dev, tc.recheck, got, tc.game)
		}
		for name, r := range got {
			if name != "game" && !r {
				t.Errorf("route via %s, recheck %v: nat service %s was rendered again", tc.dev, tc.recheck, name)
			}
		}
	}
}

// render computes the whole desired content of Sluice's tables for a plan, as the golden files
// and the tests that read the kernel back compare it.
func render(p *plan.Plan, env Environment) (*state, error) {
	d, err := renderPlan(p, env, nil, false)
	if err != nil {
		return nil, err
	}
	return d.all()
}

// TestRenderRefusesConnectionCounting: lc, wlc and max_connections never reach nft (the config
// refuses them); should a plan hold them, rendering fails naming the service.
func TestRenderRefusesConnectionCounting(t *testing.T) {
	for _, s := range []plan.Service{
		{Name: "lc", Scheduler: "lc"},
		{Name: "max", Scheduler: "maglev", Backends: []plan.Backend{{Weight: 1, MaxConns: 10}}},
	} {
		if _, err := renderService(&s, testEnv); err == nil || !strings.Contains(err.Error(), "service "+s.Name) {
			t.Errorf("rendering %s: %v; want an error naming it", s.Name, err)
		}
	}
}

// TestSharedUseIsWhatServicesFill: the base chains look up exactly the shared sets and maps the
// services put elements in, for every golden config (every mode, protocol, IP version, port
// ranges and syn_protection among them).
func TestSharedUseIsWhatServicesFill(t *testing.T) {
	dirs, _ := filepath.Glob("testdata/golden/*")
	for _, dir := range dirs {
		p := loadPlan(t, filepath.Join(dir, "config.yaml"))
		filled := sharedUse{}
		for i := range p.Services {
			st, err := renderService(&p.Services[i], testEnv)
			if err != nil {
				t.Fatal(err)
			}
			for key, set := range st.sets {
				if o, ok := parseSharedObject(key.name); ok && len(set.elems) > 0 {
					filled.add(key.family, o)
				}
			}
		}
		if used := sharedUseOf(p); !maps.EqualFunc(used, filled, maps.Equal) {
			t.Errorf("%s: the base looks up %v, the services fill %v", dir, used, filled)
		}
	}
}
