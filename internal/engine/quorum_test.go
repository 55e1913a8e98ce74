package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/health"
	"github.com/sluicelb/sluice/internal/plan"
	"github.com/sluicelb/sluice/internal/testutil"
)

// quorumServices has web, with a quorum of 3 and a hysteresis of 1 over four backends of weight
// 1 and a sorry server, and witness, which shares web's probes: an apply that changes witness's
// weights shows that the engine planned the health change that caused it.
const quorumServices = `
services:
  - name: web
    vip: 10.0.0.1
    port: 80
    quorum: 3
    hysteresis: 1
    quorum_up: [SCRIPT, up]
    quorum_down: [SCRIPT, down]
    fallback: sorry
    sorry_servers: [{address: 10.0.2.1, port: 80}]
    health_check: {type: tcp}
    backends: [{address: 10.0.1.1}, {address: 10.0.1.2}, {address: 10.0.1.3}, {address: 10.0.1.4}]
  - name: witness
    vip: 10.0.0.1
    port: 8080
    health_check: {type: tcp}
    backends:
      - {address: 10.0.1.1, port: 80}
      - {address: 10.0.1.2, port: 80}
      - {address: 10.0.1.3, port: 80}
      - {address: 10.0.1.4, port: 80}
`

// quorumScript writes a script that appends "$1 $SLUICE_SERVICE $SLUICE_QUORUM_WEIGHT" to a
// file, and returns the script and the file.
func quorumScript(t *testing.T) (script, out string) {
	dir := t.TempDir()
	script, out = filepath.Join(dir, "notify"), filepath.Join(dir, "ran")
	body := "#!/bin/sh\necho \"$1 $SLUICE_SERVICE $SLUICE_QUORUM_WEIGHT\" >> " + out + "\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return script, out
}

func readFile(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

func (h *harness) countEvents(kind string) int {
	n := 0
	for _, e := range h.Events(0) {
		if e.Type == kind {
			n++
		}
	}
	return n
}

// planned returns a service of the plan the datapath holds.
func (h *harness) planned(t *testing.T, name string) plan.Service {
	for _, s := range h.dp.Plan().Services {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("service %s is not programmed", name)
	return plan.Service{}
}

func TestQuorumHysteresis(t *testing.T) {
	script, ran := quorumScript(t)
	h := start(t, strings.ReplaceAll(quorumServices, "SCRIPT", script), Options{})
	// set flips a backend and waits for the plan that follows; web then has quorum or not.
	set := func(addr string, up, wantLost bool) {
		t.Helper()
		h.prober.flip(addr+":80", up)
		want := 0
		if up {
			want = 1
		}
		testutil.Eventually(t, addr+" planned", func() bool { return h.weights("witness")[addr+":80"] == want })
		web := h.planned(t, "web")
		sorry := h.weights("web")["10.0.2.1:80"]
		if web.QuorumLost != wantLost || (sorry == 1) != wantLost {
			t.Fatalf("after %s up=%v: quorum lost %v, sorry server weight %d; want lost %v", addr, up, web.QuorumLost, sorry, wantLost)
		}
	}
	set("10.0.1.4", false, false) // 3
	set("10.0.1.3", false, false) // 2: held down to quorum-hysteresis
	set("10.0.1.2", false, true)  // 1: lost
	if w := h.weights("web"); w["10.0.1.1"] != 0 {
		t.Fatalf("web's last backend keeps weight %d without quorum", w["10.0.1.1"])
	}
	set("10.0.1.2", true, true)  // 2
	set("10.0.1.3", true, true)  // 3: lost up to quorum+hysteresis
	set("10.0.1.4", true, false) // 4: regained
	set("10.0.1.4", false, false)
	set("10.0.1.4", true, false)
	if lost, regained := h.countEvents(EventQuorumLost), h.countEvents(EventQuorumRegained); lost != 1 || regained != 1 {
		t.Fatalf("%d quorum_lost and %d quorum_regained events, want one each: %+v", lost, regained, h.Events(0))
	}
	testutil.Eventually(t, "both commands ran", func() bool { return readFile(t, ran) == "down web 1\nup web 4\n" })
	view, err := h.Service(context.Background(), "web")
	if err != nil || view.Quorum != QuorumHeld || view.AvailableWeight != 4 {
		t.Fatalf("view %+v, %v", view, err)
	}
}

// TestQuorumLostAtStartRunsQuorumDown: like keepalived, a service that starts without its quorum
// runs quorum_down once.
func TestQuorumLostAtStartRunsQuorumDown(t *testing.T) {
	script, ran := quorumScript(t)
	yaml := strings.ReplaceAll(quorumServices, "SCRIPT", script)
	yaml = strings.Replace(yaml, "quorum: 3", "quorum: 5", 1)
	h := start(t, yaml, Options{})
	if !h.planned(t, "web").QuorumLost {
		t.Fatal("web has weight 4 of a quorum of 5 but was programmed with it")
	}
	testutil.Eventually(t, "quorum_down ran", func() bool { return readFile(t, ran) == "down web 4\n" })
	h.prober.flip("10.0.1.4:80", false)
	testutil.Eventually(t, "planned", func() bool { return h.weights("witness")["10.0.1.4:80"] == 0 })
	if n := h.countEvents(EventQuorumLost); n != 1 {
		t.Fatalf("%d quorum_lost events, want 1", n)
	}
	view, err := h.Service(context.Background(), "web")
	if err != nil || view.Quorum != QuorumLost || view.AvailableWeight != 3 || view.Backends[4].State != "sorry" {
		t.Fatalf("view %+v, %v", view, err)
	}
}

// TestQuorumStateOnlyFollowsAppliedPlans: a dry run that would lose the quorum changes neither
// the state nor runs a command; removing the service forgets its state.
func TestQuorumStateOnlyFollowsAppliedPlans(t *testing.T) {
	script, ran := quorumScript(t)
	h := start(t, strings.ReplaceAll(quorumServices, "SCRIPT", script), Options{})
	keepOne := func(cfg *config.Config) error {
		cfg.Services[0].Backends = cfg.Services[0].Backends[:1]
		return nil
	}
	result, err := h.Update(true, "test", keepOne)
	if err != nil || len(result.Changed) != 1 {
		t.Fatalf("dry run: %+v, %v", result, err)
	}
	h.quorum.mu.Lock()
	lost, decided := h.quorum.lost["web"]
	h.quorum.mu.Unlock()
	if lost || !decided || h.countEvents(EventQuorumLost) != 0 || readFile(t, ran) != "" {
		t.Fatalf("a dry run changed the quorum: lost %v, events %+v, ran %q", lost, h.Events(0), readFile(t, ran))
	}
	if _, err := h.Update(false, "test", func(cfg *config.Config) error {
		cfg.Services = cfg.Services[1:]
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "web forgotten", func() bool {
		h.quorum.mu.Lock()
		defer h.quorum.mu.Unlock()
		_, known := h.quorum.lost["web"]
		return !known
	})
}

func TestFailingQuorumCommandIsAnEvent(t *testing.T) {
	yaml := strings.ReplaceAll(quorumServices, "[SCRIPT, down]", `[/bin/sh, -c, "echo oops; echo more; exit 3"]`)
	yaml = strings.ReplaceAll(yaml, "SCRIPT", "/bin/true")
	yaml = strings.Replace(yaml, "quorum: 3", "quorum: 5", 1)
	h := start(t, yaml, Options{})
	testutil.Eventually(t, "failure published", func() bool { return h.countEvents(EventQuorumCommandFailed) == 1 })
	for _, e := range h.Events(0) {
		if e.Type == EventQuorumCommandFailed && (e.Service != "web" || e.Message != "quorum_down /bin/sh: exit status 3: oops") {
			t.Fatalf("event %+v", e)
		}
	}
}

// TestServiceViewShowsThresholdsAndPersistence: an overloaded backend (the ebpf datapath's
// report) is a state of its own, and the service shows its persistence and its refusals.
func TestServiceViewShowsThresholdsAndPersistence(t *testing.T) {
	cfg := testutil.Config(t, `
datapath: ebpf
services:
  - name: web
    vip: 10.0.0.1
    port: 80
    scheduler: wlc
    persistence_timeout: 300s
    persistence_granularity: 24
    backends:
      - {address: 10.0.1.1, max_connections: 100}
      - {address: 10.0.1.2}
`)
	e := New(cfg, Options{Prober: &fakeProber{states: map[string]health.Status{}}})
	k := &datapath.ServiceStatus{Name: "web", Backends: []datapath.BackendStatus{
		{Address: "10.0.1.1", Weight: 1, Connections: 100, Overloaded: true},
		{Address: "10.0.1.2", Weight: 1, Connections: 7},
	}, Refused: datapath.Refusals{SourceList: 3, NewConnectionsPerSecond: 2}}
	e.mu.Lock()
	v := e.serviceView(&e.cfg.Services[0], k, e.available(e.cfg))
	e.mu.Unlock()
	if v.PersistenceTimeout.String() != "300s" || v.PersistencePrefix != 24 || v.Quorum != "" || v.AvailableWeight != 2 || v.Refused != k.Refused {
		t.Fatalf("service view %+v", v)
	}
	b1, b2 := v.Backends[0], v.Backends[1]
	if b1.State != "overloaded" || b1.Connections != 100 || b1.MaxConnections != 100 || b1.MinConnections != 75 {
		t.Fatalf("backend at max_connections: %+v", b1)
	}
	if b2.State != "active" || b2.Connections != 7 || b2.MaxConnections != 0 {
		t.Fatalf("backend %+v", b2)
	}
}
