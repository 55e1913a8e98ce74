package engine

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/testutil"
)

// TestFallenBackendLosesItsStaleFlowsWhateverOnFailure: a fall drops every flow of the backend
// under on_failure: reset (established or not, counted in the event) and, under inhibit, the
// flows that are not established, which a client reusing a source port would follow to it.
func TestFallenBackendLosesItsStaleFlowsWhateverOnFailure(t *testing.T) {
	h := start(t, twoServices, Options{})
	h.dp.SetActiveFlows("web", "10.0.1.1", 7)
	h.dp.SetStaleFlows("web", "10.0.1.1", 3)
	h.dp.SetActiveFlows("api", "10.0.1.1:80", 5)
	h.dp.SetStaleFlows("api", "10.0.1.1:80", 4)
	h.prober.flip("10.0.1.1:80", false)
	testutil.Eventually(t, "flows dropped", func() bool { return len(h.dp.Resets()) == 1 && len(h.dp.StaleDrops()) == 1 })
	if got := h.dp.Resets(); !reflect.DeepEqual(got, []string{"web/10.0.1.1"}) {
		t.Fatalf("resets %v, want web's only (api is on_failure: inhibit)", got)
	}
	if got := h.dp.StaleDrops(); !reflect.DeepEqual(got, []string{"api/10.0.1.1:80"}) {
		t.Fatalf("stale drops %v, want api's only (web's flows are all reset)", got)
	}
	if h.weights("web")["10.0.1.1"] != 0 || h.weights("api")["10.0.1.1:80"] != 0 {
		t.Fatal("the fallen backend kept its weight")
	}
	for backend, want := range map[string]string{"10.0.1.1": "10 flows dropped (on_failure: reset)", "10.0.1.1:80": "4 flows not established dropped"} {
		if msg := h.flowsReset(backend); !strings.HasPrefix(msg, want) {
			t.Errorf("flows_reset of %s: %q, want %q", backend, msg, want)
		}
	}
}

// TestRisenBackendKeepsItsFlows: a backend back up by the time its fall's flows would be dropped
// keeps every flow.
func TestRisenBackendKeepsItsFlows(t *testing.T) {
	h := start(t, twoServices, Options{})
	testutil.Eventually(t, "the first apply", func() bool { return h.dp.Applies() > 0 })
	h.mu.Lock() // the fall and the rise land between two reconciles
	h.resets["api/10.0.1.2:80"] = false
	h.mu.Unlock()
	h.trigger()
	testutil.Eventually(t, "the pending reset consumed", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.resets) == 0
	})
	if got := h.dp.StaleDrops(); len(got) != 0 {
		t.Fatalf("stale drops %v of a backend that is up", got)
	}
}

// flowsReset is the message of the backend's flows_reset event ("" if none).
func (h *harness) flowsReset(backend string) string {
	for _, e := range h.Events(0) {
		if e.Type == EventFlowsReset && e.Backend == backend {
			return e.Message
		}
	}
	return ""
}

// TestResyncDropsStaleFlowsOfBackendsStillDown: a connection kept established by on_failure:
// inhibit when its backend fell turns into a closed entry once the backend dies; every resync
// drops such entries again while the backend stays down, and says so only when it dropped some.
func TestResyncDropsStaleFlowsOfBackendsStillDown(t *testing.T) {
	h := start(t, twoServices, Options{Resync: 20 * time.Millisecond})
	h.prober.flip("10.0.1.1:80", false)
	testutil.Eventually(t, "the fall's stale flows dropped", func() bool { return len(h.dp.StaleDrops()) >= 1 })
	h.dp.SetStaleFlows("api", "10.0.1.1:80", 2) // an inhibited connection was reset meanwhile
	testutil.Eventually(t, "a resync drops them", func() bool {
		return slices.ContainsFunc(h.Events(0), func(e Event) bool {
			return e.Type == EventFlowsReset && e.Backend == "10.0.1.1:80" && e.Message == "2 flows not established dropped (the backend is still down)"
		})
	})
	if got := h.dp.StaleDrops(); slices.Contains(got, "api/10.0.1.2:80") {
		t.Errorf("stale drops %v touch a backend that is up", got)
	}
}
