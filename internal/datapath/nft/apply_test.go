package nft

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/sluicelb/sluice/internal/plan"
)

// fakeHost is the machine of the unit tests of Apply and Status, without root: the datapath's
// transactions run in knftables' fake, each one that succeeds advancing the ruleset's generation
// as the kernel's do; the tables and their counters are read back from the fake; conntrack is
// empty; dsr arrives on eth0 and the backends are behind device.
type fakeHost struct {
	*knftables.Fake
	gen      uint32 // the ruleset's generation
	runs     int    // the transactions the datapath ran, rejected ones too
	rejectAt int    // the run to reject, counted from 1 (0: none)
	device   string // towards every backend
	timeouts bool   // the conntrack timeout policies exist
	ns       string // the network namespace's name (namespaceID)
	reads    int    // how many times the tables were read back
}

// newFakeDatapath is a datapath on a fakeHost with empty tables.
func newFakeDatapath() (*Datapath, *fakeHost) {
	h := &fakeHost{Fake: knftables.NewFake("", ""), gen: 1, device: "eth1"}
	return newDatapath(h, fakeFlows{h}, h, slog.New(slog.DiscardHandler)), h
}

// fakeFlows lists the maps of a fakeHost's netdev table, as the datapath's flows interface lists
// the kernel's; a missing map has no elements.
type fakeFlows struct{ *fakeHost }

func (f fakeFlows) ListElements(_ context.Context, _, name string) ([]*knftables.Element, error) {
	if t := f.Tables[knftables.NetDevFamily][TableName]; t != nil && t.Maps[name] != nil {
		return t.Maps[name].Elements, nil
	}
	return nil, nil
}

// errRejected is what the fake's nft answers to the transaction it rejects (rejectAt).
var errRejected = errors.New("nft rejects the transaction")

// Run runs tx in the fake, or rejects it at rejectAt.
func (h *fakeHost) Run(ctx context.Context, tx *knftables.Transaction) error {
	h.runs++
	if h.runs == h.rejectAt {
		return errRejected
	}
	if err := h.Fake.Run(ctx, tx); err != nil {
		return err
	}
	h.gen++
	return nil
}

func (h *fakeHost) check(*plan.Plan) error { return nil }

func (h *fakeHost) environment(configured []string) (Environment, error) {
	env := Environment{DSRDevices: configured, DeviceTo: func(netip.Addr) (string, error) { return h.device, nil }}
	if len(configured) == 0 {
		env.DSRDevices = testEnv.DSRDevices
	}
	return env, nil
}

// ensureCTTimeouts creates the inet table, as the machine's does with its policies (which the
// fake cannot hold), when the table or the policies are missing.
func (h *fakeHost) ensureCTTimeouts(ctx context.Context) (bool, error) {
	if h.timeouts && h.Tables[knftables.InetFamily][TableName] != nil {
		return false, nil
	}
	tx := h.NewTransaction()
	tx.Add(&knftables.Table{Family: knftables.InetFamily, Name: TableName})
	if err := h.Fake.Run(ctx, tx); err != nil {
		return false, err
	}
	h.gen++
	h.timeouts = true
	return true, nil
}

func (h *fakeHost) generation() uint32 { return h.gen }

func (h *fakeHost) tables() (map[knftables.Family]bool, error) {
	out := map[knftables.Family]bool{}
	for _, f := range families {
		out[f] = h.Tables[f][TableName] != nil
	}
	return out, nil
}

func (h *fakeHost) namespace() (string, error) { return h.ns, nil }

func (h *fakeHost) counters(f knftables.Family) (map[string]*knftables.Counter, error) {
	out := map[string]*knftables.Counter{}
	if t := h.Tables[f][TableName]; t != nil {
		for name, c := range t.Counters {
			out[name] = &c.Counter
		}
	}
	return out, nil
}

func (h *fakeHost) conntrack(uint8) ([]ctEntry, error) { return nil, nil }

func (h *fakeHost) write(*changeSet) (bool, string, error) { return false, "the fake", nil }

func (h *fakeHost) elements(f knftables.Family, set string) ([]*knftables.Element, error) {
	if t := h.Tables[f][TableName]; t != nil && t.Maps[set] != nil {
		return t.Maps[set].Elements, nil
	}
	return nil, nil
}

// read reads the fake's tables back as readTables reads the kernel's, with the chains' rules.
func (h *fakeHost) read(context.Context) (*state, error) {
	h.reads++
	st := newState()
	for _, f := range families {
		t := h.Tables[f][TableName]
		if t == nil {
			continue
		}
		st.tables[f] = true
		for name, c := range t.Chains {
			rules := make([]string, len(c.Rules))
			for i, r := range c.Rules {
				rules[i] = r.Rule
			}
			st.chains[objKey{f, name}] = &chainDef{chain: &knftables.Chain{Family: f, Table: TableName, Name: name}, rules: rules}
		}
		counters, _ := h.counters(f)
		for name, c := range counters {
			st.counters[objKey{f, name}] = c
		}
		for name, s := range t.Sets {
			readFakeElements(st.addSet(f, &knftables.Set{Name: name}), name, s.Elements)
		}
		for name, m := range t.Maps {
			readFakeElements(st.addSet(f, &knftables.Map{Name: name}), name, m.Elements)
		}
	}
	return st, nil
}

// readFakeElements adds a set's elements to def, but those the packet path owns (packetPathKinds).
func readFakeElements(def *setDef, name string, elems []*knftables.Element) {
	if o, ok := parseServiceObject(name); ok && packetPathKinds[o.kind] {
		return
	}
	for _, e := range elems {
		c := *e
		def.add(&c)
	}
}

// fresh is what a single transaction from empty tables makes of p in the environment env: the
// fake's dump, sorted.
func fresh(t *testing.T, p *plan.Plan, env Environment) string {
	t.Helper()
	st, err := render(p, env)
	if err != nil {
		t.Fatal(err)
	}
	fake := knftables.NewFake("", "")
	tx := fake.NewTransaction()
	reconcile(tx, newState(), st)
	if err := fake.Run(context.Background(), tx); err != nil {
		t.Fatal(err)
	}
	return sortedLines(fake.Dump())
}

// wantNothingToDo applies p again: no transaction may run, and the generation stays known.
func wantNothingToDo(t *testing.T, d *Datapath, h *fakeHost, p *plan.Plan) {
	t.Helper()
	runs := h.runs
	apply(t, d, p)
	if h.runs != runs {
		t.Errorf("applying the same plan again ran %d transactions", h.runs-runs)
	}
	if d.generation != h.gen {
		t.Errorf("generation %d after an apply at %d: the datapath lost track of its own transactions", d.generation, h.gen)
	}
}

// TestApplyProgramsEveryGoldenCase applies each golden config to empty tables: the tables are
// then its ruleset.nft, and applying it again runs nothing.
func TestApplyProgramsEveryGoldenCase(t *testing.T) {
	dirs, _ := filepath.Glob("testdata/golden/*")
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			d, h := newFakeDatapath()
			p := loadPlan(t, filepath.Join(dir, "config.yaml"))
			apply(t, d, p)
			want, err := os.ReadFile(filepath.Join(dir, "ruleset.nft"))
			if err != nil {
				t.Fatal(err)
			}
			if got := sortedLines(h.Dump()); got != sortedLines(string(want)) {
				t.Errorf("the tables differ from ruleset.nft:\n%s", got)
			}
			wantNothingToDo(t, d, h, p)
		})
	}
}

// TestApplyRunsOnlyTheChange applies each transition's before and after plans: the second Apply
// runs tx.nft, one transaction, and leaves the tables as a fresh apply of the after plan.
func TestApplyRunsOnlyTheChange(t *testing.T) {
	dirs, _ := filepath.Glob("testdata/transitions/*")
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			d, h := newFakeDatapath()
			before, after := loadPlan(t, filepath.Join(dir, "before.yaml")), loadPlan(t, filepath.Join(dir, "after.yaml"))
			apply(t, d, before)
			runs := h.runs
			apply(t, d, after)
			if h.runs != runs+1 {
				t.Fatalf("the change ran %d transactions, want 1", h.runs-runs)
			}
			want, err := os.ReadFile(filepath.Join(dir, "tx.nft"))
			if err != nil {
				t.Fatal(err)
			}
			if got := h.LastTransaction.String(); got != string(want) {
				t.Errorf("the change ran\n%s\nwant tx.nft\n%s", got, want)
			}
			if got, want := sortedLines(h.Dump()), fresh(t, after, testEnv); got != want {
				t.Errorf("the tables differ from a fresh apply:\n%s\n---\n%s", got, want)
			}
			wantNothingToDo(t, d, h, after)
		})
	}
}

// batchCases are changes from a plan to another that take several transactions of 3 operations.
var batchCases = map[string][2]string{
	"vip-handover": {"testdata/batches/handover-before.yaml", "testdata/batches/handover-after.yaml"},
	"from-nothing": {"testdata/batches/empty.yaml", "testdata/batches/handover-after.yaml"},
	"to-nothing":   {"testdata/batches/handover-before.yaml", "testdata/batches/empty.yaml"},
	"nat-to-dsr":   {"testdata/transitions/nat-to-dsr/before.yaml", "testdata/transitions/nat-to-dsr/after.yaml"},
}

// TestApplyInBatches applies changes through transactions of at most 3 operations: each takes
// several, and the tables end as a fresh apply leaves them, at a generation the datapath knows.
func TestApplyInBatches(t *testing.T) {
	for name, c := range batchCases {
		t.Run(name, func(t *testing.T) {
			d, h := newFakeDatapath()
			d.maxOps = 3
			before, after := loadPlan(t, c[0]), loadPlan(t, c[1])
			apply(t, d, before)
			runs := h.runs
			apply(t, d, after)
			if h.runs-runs < 2 {
				t.Errorf("the change ran %d transactions, want several", h.runs-runs)
			}
			if got, want := sortedLines(h.Dump()), fresh(t, after, testEnv); got != want {
				t.Errorf("the tables differ from a fresh apply:\n%s\n---\n%s", got, want)
			}
			wantNothingToDo(t, d, h, after)
		})
	}
}

// TestApplyRejectedMidway: the second transaction the change runs (d's removal is the first: the
// batch of shared objects has nothing to do) is rejected. The error names
// the batch and its services; every service is wholly as before or as after; what Status reports
// is still the last plan committed; and the next Apply reads the tables and completes the change.
func TestApplyRejectedMidway(t *testing.T) {
	d, h := newFakeDatapath()
	d.maxOps = 3
	c := batchCases["vip-handover"]
	before, after := loadPlan(t, c[0]), loadPlan(t, c[1])
	apply(t, d, before)
	committed := d.layout.Load()
	h.rejectAt = h.runs + 2
	err := d.Apply(context.Background(), after)
	if !errors.Is(err, errRejected) {
		t.Fatalf("apply: %v, want the rejection", err)
	}
	for _, want := range []string{"transaction 3 of 4", "services a, b, c", "rejected after 1 applied"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if d.layout.Load() != committed || d.committed != nil {
		t.Error("a rejected apply changed what the datapath reports, or kept trusting its committed state")
	}
	now, err := h.read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	wasBefore, wantAfter := renderFile(t, c[0]), renderFile(t, c[1])
	for _, svc := range servicesOf(wasBefore, wantAfter) {
		got := owned(contentOf(now), svc)
		if !slices.Equal(got, owned(contentOf(wasBefore), svc)) && !slices.Equal(got, owned(contentOf(wantAfter), svc)) {
			t.Errorf("service %s is half changed:\n%v", svc, got)
		}
	}
	apply(t, d, after)
	if got, want := sortedLines(h.Dump()), fresh(t, after, testEnv); got != want {
		t.Errorf("the next apply did not complete the change:\n%s\n---\n%s", got, want)
	}
	wantNothingToDo(t, d, h, after)
}

// TestApplyRejectedChangesNothing: a change of one transaction that is rejected leaves the tables
// as they were, says so and names the services it was changing.
func TestApplyRejectedChangesNothing(t *testing.T) {
	d, h := newFakeDatapath()
	c := batchCases["vip-handover"]
	before, after := loadPlan(t, c[0]), loadPlan(t, c[1])
	apply(t, d, before)
	tables, committed := h.Dump(), d.layout.Load()
	h.rejectAt = h.runs + 1
	err := d.Apply(context.Background(), after)
	if !errors.Is(err, errRejected) {
		t.Fatalf("apply: %v, want the rejection", err)
	}
	for _, want := range []string{"rejected, nothing changed", "services a, b, c, d"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if h.Dump() != tables || d.layout.Load() != committed {
		t.Error("a rejected transaction changed the tables or what the datapath reports")
	}
	apply(t, d, after)
	if got, want := sortedLines(h.Dump()), fresh(t, after, testEnv); got != want {
		t.Errorf("the next apply did not make the change:\n%s\n---\n%s", got, want)
	}
}

// TestResyncRepairsOthersChanges: someone deletes an element of a service's members map. Apply
// trusts what it committed and does not see it; after Resync, Apply reads the tables and puts
// it back. A Resync that finds no other transaction runs nothing.
func TestResyncRepairsOthersChanges(t *testing.T) {
	d, h := newFakeDatapath()
	p := loadPlan(t, "testdata/golden/nat-maglev/config.yaml")
	apply(t, d, p)
	d.Resync()
	wantNothingToDo(t, d, h, p)

	st, err := h.read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	members := st.sets[objKey{knftables.InetFamily, namesOf(&p.Services[0]).members}]
	tx := h.NewTransaction()
	tx.Delete(deletable(members.elems[sortedIDs(members.elems)[0]]))
	if err := h.Fake.Run(context.Background(), tx); err != nil {
		t.Fatal(err)
	}
	h.gen++
	damaged := h.Dump()
	apply(t, d, p)
	if h.Dump() != damaged {
		t.Fatal("an apply without resync read the tables")
	}
	d.Resync()
	apply(t, d, p)
	if got, want := sortedLines(h.Dump()), fresh(t, p, testEnv); got != want {
		t.Errorf("resync did not repair the tables:\n%s\n---\n%s", got, want)
	}
	wantNothingToDo(t, d, h, p)
}

// TestResyncFollowsMovedRoutes: the route to a dsr service's backends moves to eth2. Apply keeps
// the committed backend chains until a Resync, after which they forward out of eth2.
func TestResyncFollowsMovedRoutes(t *testing.T) {
	d, h := newFakeDatapath()
	p := loadPlan(t, "testdata/golden/dsr-tcp/config.yaml")
	apply(t, d, p)
	h.device = "eth2"
	runs := h.runs
	apply(t, d, p)
	if h.runs != runs {
		t.Fatal("an apply without resync looked the routes up again")
	}
	d.Resync()
	apply(t, d, p)
	moved := Environment{DSRDevices: testEnv.DSRDevices, DeviceTo: func(netip.Addr) (string, error) { return "eth2", nil }}
	if got, want := sortedLines(h.Dump()), fresh(t, p, moved); got != want {
		t.Errorf("resync did not follow the route:\n%s\n---\n%s", got, want)
	}
}

// TestFlushDeletesTheTables: Flush leaves no table of Sluice's, in one transaction that reads
// none of their content (none at all when there is no table), and the next Apply programs the
// plan whole again.
func TestFlushDeletesTheTables(t *testing.T) {
	d, h := newFakeDatapath()
	p := loadPlan(t, "testdata/golden/dsr-tcp/config.yaml")
	apply(t, d, p)
	reads, runs := h.reads, h.runs
	if err := d.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if dump := h.Dump(); dump != "" {
		t.Errorf("tables left after Flush:\n%s", dump)
	}
	if h.reads != reads || h.runs != runs+1 {
		t.Errorf("Flush read the tables %d times and ran %d transactions, want 0 and 1", h.reads-reads, h.runs-runs)
	}
	if err := d.Flush(context.Background()); err != nil || h.runs != runs+1 {
		t.Errorf("Flush without tables: %v, and %d transactions, want none", err, h.runs-runs-1)
	}
	apply(t, d, p)
	if got, want := sortedLines(h.Dump()), fresh(t, p, testEnv); got != want {
		t.Errorf("the apply after Flush differs from a fresh one:\n%s\n---\n%s", got, want)
	}
}

// TestStatusFromThePlanIsStatusReadBack: for every golden config, what the daemon's datapath
// reports of the services it committed (their layout from the plan, the counters from the tables)
// is what a one-shot datapath reads back from the tables alone, service by service too.
func TestStatusFromThePlanIsStatusReadBack(t *testing.T) {
	dirs, _ := filepath.Glob("testdata/golden/*")
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			d, h := newFakeDatapath()
			p := loadPlan(t, filepath.Join(dir, "config.yaml"))
			apply(t, d, p)
			countDistinctly(h)
			planned, err := d.Status(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			oneShot := newDatapath(h, fakeFlows{h}, h, slog.New(slog.DiscardHandler))
			read, err := oneShot.Status(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(planned) != len(p.Services) || !reflect.DeepEqual(planned, read) {
				t.Fatalf("status from the plan:\n%+v\nread back:\n%+v", planned, read)
			}
			for _, want := range planned {
				got, found, err := d.ServiceStatus(context.Background(), want.Name)
				if err != nil || !found || !reflect.DeepEqual(got, want) {
					t.Errorf("ServiceStatus(%s) = %+v, %v, %v; want %+v", want.Name, got, found, err, want)
				}
			}
		})
	}
}

// countDistinctly gives every counter of the fake's tables packets and bytes of its own.
func countDistinctly(h *fakeHost) {
	n := uint64(0)
	for _, f := range families {
		if t := h.Tables[f][TableName]; t != nil {
			for _, name := range slices.Sorted(maps.Keys(t.Counters)) {
				n++
				t.Counters[name].Packets, t.Counters[name].Bytes = ptr(n), ptr(100*n)
			}
		}
	}
}
