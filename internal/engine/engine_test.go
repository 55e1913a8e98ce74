package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath/fake"
	"github.com/sluicelb/sluice/internal/health"
	"github.com/sluicelb/sluice/internal/testutil"
)

const twoServices = `
services:
  - name: web
    vip: 10.0.0.1
    port: 80
    health_check: {type: tcp, on_failure: reset}
    backends:
      - address: 10.0.1.1
      - address: 10.0.1.2
      - address: 10.0.1.3
  - name: api
    vip: 10.0.0.1
    port: 8080
    health_check: {type: tcp}
    backends:
      - address: 10.0.1.1
        port: 80
      - address: 10.0.1.2
        port: 80
`

// fakeProber holds health states the test sets, and reports flips to the engine like health.Monitor.
type fakeProber struct {
	mu     sync.Mutex
	states map[string]health.Status
	probes []health.Probe
	notify func(health.Status)
}

func (p *fakeProber) Set(probes []health.Probe) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.probes = probes
}

func (p *fakeProber) Status(key string) (health.Status, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, ok := p.states[key]
	return st, ok
}

func (p *fakeProber) All() []health.Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []health.Status
	for _, st := range p.states {
		out = append(out, st)
	}
	return out
}

// flip sets the state of every probe of target ("10.0.1.1:80") and tells the engine.
func (p *fakeProber) flip(target string, up bool) {
	p.mu.Lock()
	var changed []health.Status
	for _, probe := range p.probes {
		if probe.Target.String() != target || p.states[probe.Key()].Up == up && p.states[probe.Key()].Key != "" {
			continue
		}
		st := health.Status{Key: probe.Key(), Type: probe.Check.Type, Target: probe.Target, Up: up, Since: time.Now(), Checks: 1}
		p.states[st.Key] = st
		changed = append(changed, st)
	}
	p.mu.Unlock()
	for _, st := range changed {
		p.notify(st)
	}
}

type harness struct {
	*Engine
	dp     *fake.Datapath
	prober *fakeProber
}

func start(t testing.TB, yaml string, opts Options) *harness {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{dp: fake.New(), prober: &fakeProber{states: map[string]health.Status{}}}
	opts.Datapath, opts.Prober = h.dp, h.prober
	if opts.MinApplyInterval == 0 {
		opts.MinApplyInterval = time.Millisecond
	}
	if opts.DrainPoll == 0 {
		opts.DrainPoll = 5 * time.Millisecond
	}
	h.Engine = New(cfg, opts)
	h.prober.notify = h.HealthChanged
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = h.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	testutil.Eventually(t, "first apply", func() bool { return h.dp.Applies() == 1 })
	return h
}

// weights returns the programmed weight of every backend of a service, by ID.
func (h *harness) weights(service string) map[string]int {
	out := map[string]int{}
	if p := h.dp.Plan(); p != nil {
		for _, s := range p.Services {
			if s.Name == service {
				for _, b := range s.Backends {
					out[b.ID()] = b.Weight
				}
			}
		}
	}
	return out
}

func (h *harness) hasEvent(kind, backend string) bool {
	for _, e := range h.Events(0) {
		if e.Type == kind && e.Backend == backend {
			return true
		}
	}
	return false
}

func TestReconcileIsIdempotent(t *testing.T) {
	h := start(t, twoServices, Options{})
	for range 20 {
		if _, err := h.Replace(false, "test", h.Config()); err != nil {
			t.Fatal(err)
		}
		h.trigger()
	}
	time.Sleep(50 * time.Millisecond) // give the loop the chance to misbehave
	if n := h.dp.Applies(); n != 1 {
		t.Fatalf("an unchanged config was applied %d times, want once", n)
	}
	if st := h.Stats(); st.Applies != 1 || st.Failures != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestResyncAppliesAgainComparedWithTheKernel(t *testing.T) {
	h := start(t, twoServices, Options{Resync: 10 * time.Millisecond})
	testutil.Eventually(t, "resync applies", func() bool { return h.dp.Applies() >= 3 })
	applies := h.dp.Applies() // before the resyncs: each resync comes before its apply
	if resyncs := h.dp.Resyncs(); resyncs < applies-1 {
		t.Fatalf("%d applies but %d resyncs: every apply after the first was a resync", applies, resyncs)
	}
}

func TestHealthFlapBurstIsFoldedIntoFewApplies(t *testing.T) {
	const interval = 20 * time.Millisecond
	h := start(t, twoServices, Options{MinApplyInterval: interval})
	began := time.Now()
	for i := range 501 {
		h.prober.flip("10.0.1.3:80", i%2 == 1) // ends down
	}
	elapsed := time.Since(began)
	testutil.Eventually(t, "the last state applied", func() bool { return h.weights("web")["10.0.1.3"] == 0 })
	// One apply per MinApplyInterval at most, plus the first and the final one.
	if n, bound := h.dp.Applies(), 3+int(elapsed/interval); n > bound {
		t.Fatalf("501 flaps in %s caused %d applies, want at most %d", elapsed, n, bound)
	}
}

func TestFallenBackendLeavesTableAndItsFlowsAreResetWhenAsked(t *testing.T) {
	h := start(t, twoServices, Options{})
	h.dp.SetActiveFlows("web", "10.0.1.1", 7)
	h.prober.flip("10.0.1.1:80", false)
	testutil.Eventually(t, "backend out of web", func() bool { return h.weights("web")["10.0.1.1"] == 0 })
	testutil.Eventually(t, "flows reset", func() bool { return len(h.dp.Resets()) == 1 })
	if got := h.dp.Resets(); !reflect.DeepEqual(got, []string{"web/10.0.1.1"}) {
		t.Fatalf("resets %v: api (on_failure: inhibit) must keep its flows", got)
	}
	if h.weights("api")["10.0.1.1:80"] != 0 {
		t.Fatal("api shares the probe of 10.0.1.1:80 but kept it")
	}
	if !h.hasEvent(EventBackendDown, "10.0.1.1:80") || !h.hasEvent(EventFlowsReset, "10.0.1.1") {
		t.Fatalf("events %+v", h.Events(0))
	}
	h.prober.flip("10.0.1.1:80", true)
	testutil.Eventually(t, "backend back", func() bool { return h.weights("web")["10.0.1.1"] == 1 })
}

func TestInvalidMutationChangesNothing(t *testing.T) {
	h := start(t, twoServices, Options{})
	before := h.Config()
	_, err := h.Update(false, "test", func(cfg *config.Config) error {
		w := 5000
		cfg.Services[0].Backends[0].Weight = &w
		return nil
	})
	var fieldErrs config.Errors
	if !errors.As(err, &fieldErrs) || fieldErrs[0].Path != "services[0].backends[0].weight" {
		t.Fatalf("got %v, want a field error on services[0].backends[0].weight", err)
	}
	_, err = h.Update(false, "test", func(cfg *config.Config) error {
		cfg.Services = nil
		return errors.New("refused by the mutation")
	})
	if err == nil {
		t.Fatal("a failing mutation was accepted")
	}
	if !reflect.DeepEqual(before, h.Config()) {
		t.Fatal("the running config changed")
	}
	time.Sleep(20 * time.Millisecond)
	if h.dp.Applies() != 1 {
		t.Fatalf("applies %d after rejected changes", h.dp.Applies())
	}
}

func TestDryRunReportsMovedShareWithoutChanging(t *testing.T) {
	h := start(t, twoServices, Options{})
	before := h.Config()
	change, err := h.Update(true, "test", func(cfg *config.Config) error {
		cfg.Services[1].Backends = cfg.Services[1].Backends[:1]
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(change.Changed) != 1 || change.Changed[0] != "web" && change.Moved["api"] < 0.4 {
		t.Fatalf("change %+v: removing one of two backends moves about half of api's flows", change)
	}
	if !reflect.DeepEqual(before, h.Config()) || h.dp.Applies() != 1 {
		t.Fatal("a dry run changed something")
	}
}

func TestDrainFollowsFlowsToZero(t *testing.T) {
	h := start(t, twoServices, Options{})
	h.dp.SetActiveFlows("api", "10.0.1.2:80", 3)
	d, err := h.Drain(context.Background(), "api", "10.0.1.2", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if d.State != DrainDraining || d.InitialFlows != 3 || d.PreviousWeight != 1 || d.Backend != "10.0.1.2:80" {
		t.Fatalf("drain %+v", d)
	}
	testutil.Eventually(t, "weight 0 applied", func() bool { return h.weights("api")["10.0.1.2:80"] == 0 })
	if h.hasEvent(EventDrained, "10.0.1.2:80") {
		t.Fatal("drained with flows left")
	}
	h.dp.SetActiveFlows("api", "10.0.1.2:80", 0)
	testutil.Eventually(t, "drained event", func() bool { return h.hasEvent(EventDrained, "10.0.1.2:80") })
	// Weighting it again ends the drain record.
	if _, err := h.Update(false, "test", func(cfg *config.Config) error {
		s, _, _ := FindService(cfg, "api")
		b, _, err := FindBackend(s, "10.0.1.2:80")
		one := 1
		b.Weight = &one
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(h.Drains()) != 0 {
		t.Fatalf("drains %+v", h.Drains())
	}
}

func TestDrainTimesOut(t *testing.T) {
	h := start(t, twoServices, Options{})
	h.dp.SetActiveFlows("web", "10.0.1.3", 2)
	if _, err := h.Drain(context.Background(), "web", "10.0.1.3", 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "drained by timeout", func() bool { return h.hasEvent(EventDrained, "10.0.1.3") })
	d := h.Drains()[0]
	if d.State != DrainDrained || !strings.Contains(d.Reason, "timeout with 2 flows") {
		t.Fatalf("drain %+v", d)
	}
	if _, err := h.Drain(context.Background(), "web", "10.0.9.9", 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("draining an unknown backend: %v", err)
	}
}

func TestReloadRejectsBadFileAndKeepsRunning(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(twoServices), 0o644); err != nil {
		t.Fatal(err)
	}
	h := start(t, twoServices, Options{ConfigPath: path})
	before := h.Config()
	bad := strings.Replace(twoServices, "port: 8080", "port: 80800", 1)
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Reload(); err == nil || !strings.Contains(err.Error(), "sluice.yaml:13: services[1].port") {
		t.Fatalf("reload of a bad file: %v", err)
	}
	if !reflect.DeepEqual(before, h.Config()) {
		t.Fatal("a bad file changed the running config")
	}
	if !slices.ContainsFunc(h.Events(0), func(ev Event) bool {
		return ev.Type == EventReloadFailed && strings.Contains(ev.Message, "sluice.yaml:13: services[1].port")
	}) {
		t.Fatalf("no reload_failed event with the file's error: %+v", h.Events(0))
	}
	good := strings.Replace(twoServices, "port: 8080", "port: 8081", 1)
	if err := os.WriteFile(path, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	change, err := h.Reload()
	if err != nil || !reflect.DeepEqual(change.Changed, []string{"api"}) {
		t.Fatalf("reload: %+v %v", change, err)
	}
	testutil.Eventually(t, "reload applied", func() bool { return h.dp.Plan().Services[0].Ports.First() == 8081 })
}

func TestServicesViewMergesConfigHealthAndKernel(t *testing.T) {
	h := start(t, twoServices+"    fallback: sorry\n    sorry_servers: [{address: 10.0.2.1, port: 80}]\n", Options{})
	h.dp.SetActiveFlows("api", "10.0.1.1:80", 4)
	h.prober.flip("10.0.1.2:80", false)
	testutil.Eventually(t, "down applied", func() bool { return h.weights("api")["10.0.1.2:80"] == 0 })
	views, err := h.Services(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	api := views[1]
	if api.Name != "api" || !api.Programmed || len(api.Backends) != 3 {
		t.Fatalf("api view %+v", api)
	}
	b1, b2, sorry := api.Backends[0], api.Backends[1], api.Backends[2]
	if b1.State != "active" || b1.ActiveFlows != 4 || b1.Share != 1 || b2.State != "down" || b2.Health != "down" || b2.Weight != 1 || b2.ProgrammedWeight != 0 {
		t.Fatalf("backends %+v %+v", b1, b2)
	}
	if !sorry.Sorry || sorry.State != "standby" {
		t.Fatalf("sorry server %+v", sorry)
	}
}

func TestChangingTheDatapathTakesARestart(t *testing.T) {
	h := start(t, twoServices, Options{})
	before := h.Config()
	for _, head := range []string{"datapath: ebpf\n", "datapath: ebpf\nattach: xdp\n"} {
		cfg, err := config.Parse("new.yaml", []byte(head+twoServices))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Replace(false, "test", cfg); err == nil || !strings.Contains(err.Error(), "datapath: the daemon runs datapath nft: changing it to ebpf takes a restart") {
			t.Errorf("replacing with %q: %v", head, err)
		}
	}
	if !reflect.DeepEqual(before, h.Config()) {
		t.Fatal("a refused datapath change altered the running config")
	}
}

func TestResizingTheEBPFMapsTakesARestart(t *testing.T) {
	h := start(t, "datapath: ebpf\n"+twoServices, Options{})
	for head, ok := range map[string]bool{
		"datapath: ebpf\nebpf: {max_flows: 1048576}\n":  true, // the default, spelled out
		"datapath: ebpf\nebpf: {max_flows: 65536}\n":    false,
		"datapath: ebpf\nebpf: {maglev_slots: 65536}\n": false,
	} {
		cfg, err := config.Parse("new.yaml", []byte(head+twoServices))
		if err != nil {
			t.Fatal(err)
		}
		_, err = h.Replace(true, "test", cfg)
		if ok != (err == nil) || !ok && !strings.Contains(err.Error(), "ebpf: the daemon's maps hold 1048576 flows and 16777216 Maglev slots") {
			t.Errorf("replacing with %q: %v", head, err)
		}
	}
}

func TestServiceIsOneOfServices(t *testing.T) {
	h := start(t, twoServices, Options{})
	testutil.Eventually(t, "applied", func() bool { return h.dp.Plan() != nil })
	all, err := h.Services(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range all {
		got, err := h.Service(context.Background(), want.Name)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("Service(%s) = %+v, %v; want %+v", want.Name, got, err, want)
		}
	}
	if _, err := h.Service(context.Background(), "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("an unknown service: %v", err)
	}
}

// TestChangeOverTheDatapathsBudgetChangesNothing: a config the datapath cannot hold is refused
// as an error of the limit's key, before it becomes the running config.
func TestChangeOverTheDatapathsBudgetChangesNothing(t *testing.T) {
	h := start(t, twoServices, Options{})
	h.dp.SetBudget(2)
	before := h.Config()
	_, err := h.Update(false, "test", func(cfg *config.Config) error {
		extra := cfg.Services[0]
		extra.Name, extra.VIP = "third", config.IPOf("10.91.9.103")
		cfg.Services = append(cfg.Services, extra)
		return nil
	})
	var fieldErrs config.Errors
	if !errors.As(err, &fieldErrs) || fieldErrs[0].Path != "fake.max_services" || !strings.Contains(err.Error(), "needs 3 services") {
		t.Fatalf("got %v, want a field error on fake.max_services", err)
	}
	if !reflect.DeepEqual(before, h.Config()) {
		t.Fatal("the running config changed")
	}
}

// TestReadsBesideTheReconcileLock: the drains, the node's drain state, the apply stats, the
// quorums and the BGP side have locks of their own, so the API reads them without waiting for
// the reconcile loop's (held here the whole time).
func TestReadsBesideTheReconcileLock(t *testing.T) {
	cfg := testutil.Config(t, `
services:
  - name: web
    vip: 10.0.0.1
    port: 80
    quorum: 1
    backends:
      - {address: 10.0.1.1}
`)
	e := New(cfg, Options{Prober: &fakeProber{states: map[string]health.Status{}}})
	e.mu.Lock()
	defer e.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if len(e.Drains()) != 0 || e.Stats().Applies != 0 || e.node.get().State != NodeActive {
			t.Errorf("drains %v, stats %+v, node %+v", e.Drains(), e.Stats(), e.node.get())
		}
		if speaker, _ := e.bgp.running(); speaker != nil || e.quorum.state(&cfg.Services[0], 1) != QuorumHeld {
			t.Errorf("speaker %v, quorum %s", speaker, e.quorum.state(&cfg.Services[0], 1))
		}
	}()
	<-done // before, each of these waited for e.mu: the test hung
}
