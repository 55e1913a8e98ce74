package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/lab"
)

// Sizes of the session tests' traffic.
const (
	sessionConns  = 150 // one-request connections per check
	countedConns  = 9   // keep-alive connections of the least-connection checks (3 per backend)
	limitedConns  = 12  // keep-alive connections against a backend with max_connections 2
	limitedMaxStr = "max_connections: 2"
)

// TestSessions runs the IPVS schedulers and session settings with real clients, in every mode of
// both datapaths: persistence keeps the client on one backend and moves it when that backend is
// drained; sh keeps the client's address on one backend (its ports too, unless sh_port); on
// ebpf, lc spreads held connections evenly and refills the emptiest backend, and a backend at
// max_connections takes no more. The nft datapath refuses lc and max_connections, naming why.
func TestSessions(t *testing.T) {
	requireLab(t)
	forEveryFlavor(t, func(t *testing.T, f Flavor) {
		t.Run("persistence", func(t *testing.T) { testPersistence(t, f) })
		t.Run("sh", func(t *testing.T) { testSourceHash(t, f) })
		if f.Datapath != "ebpf" {
			t.Run("lc-refused", func(t *testing.T) {
				requireRefused(t, f.Config(webService("lc", equalPool(false))), "lc needs datapath ebpf")
			})
			return
		}
		t.Run("lc", func(t *testing.T) { testLeastConnections(t, f) })
		t.Run("max-connections", func(t *testing.T) { testMaxConnections(t, f) })
	})
}

// oneBackendOnly sends sessionConns one-request connections (kernel-chosen source ports) and
// returns the one backend that answered them all.
func oneBackendOnly(t *testing.T, svc Service, what string) string {
	t.Helper()
	res := hammer(t, 1, sessionConns, func() (string, error) { return httpOnce(svc.Addr()) })
	res.requireNoFailures(t)
	if len(res.PerBackend) != 1 {
		t.Fatalf("%s: one client's connections reached %v, want one backend", what, res)
	}
	return res.Backends()[0]
}

func testPersistence(t *testing.T, f Flavor) {
	svc := webService("maglev", equalPool(false))
	svc.Extra = []string{"persistence_timeout: 300s"}
	applyFresh(t, f.Config(svc))
	first := oneBackendOnly(t, svc, "persistence")
	// Drained, the backend takes no new persistent session: the client moves, and stays.
	drained := svc
	drained.Backends = slices.Clone(svc.Backends)
	drained.Backends[backendIndex(first)-1].Weight = 0
	apply(t, f.Config(drained))
	if second := oneBackendOnly(t, drained, "persistence after the drain"); second == first {
		t.Fatalf("after draining %s the client still reached it", first)
	}
}

func testSourceHash(t *testing.T, f Flavor) {
	svc := webService("sh", equalPool(false))
	applyFresh(t, f.Config(svc))
	oneBackendOnly(t, svc, "sh")
	svc.Extra = []string{"sh_port: true"}
	apply(t, f.Config(svc))
	res := hammer(t, workers, sessionConns, func() (string, error) { return httpOnce(svc.Addr()) })
	t.Logf("sh_port, one client: %v", res)
	requireAllBackends(t, res)
}

// holdConnections opens n keep-alive connections and returns them by the backend that answered.
func holdConnections(t *testing.T, svc Service, n int) map[string][]*keepAlive {
	t.Helper()
	held := map[string][]*keepAlive{}
	for range n {
		k := dialKeepAlive(t, svc.Addr())
		b, err := k.get()
		if err != nil {
			t.Fatal(err)
		}
		held[b] = append(held[b], k)
	}
	return held
}

// counts renders how many connections each backend holds, "b1=3 b2=3 b3=3".
func counts(held map[string][]*keepAlive) string {
	var out []string
	for i := 1; i <= labBackends; i++ {
		out = append(out, fmt.Sprintf("%s=%d", lab.BackendName(i), len(held[lab.BackendName(i)])))
	}
	return strings.Join(out, " ")
}

func testLeastConnections(t *testing.T, f Flavor) {
	svc := webService("lc", equalPool(false))
	applyFresh(t, f.Config(svc))
	held := holdConnections(t, svc, countedConns)
	if got, want := counts(held), "b1=3 b2=3 b3=3"; got != want {
		t.Fatalf("lc spread %d held connections as %s, want %s", countedConns, got, want)
	}
	s := findService(t, list(t), svc.Name)
	for _, b := range s.Backends {
		if b.Connections != 3 {
			t.Errorf("sluice list shows %s with %d connections, want 3", b.Address, b.Connections)
		}
	}
	for _, k := range held["b1"] {
		k.c.Close()
	}
	delete(held, "b1")
	refilled := holdConnections(t, svc, 3)
	if got := counts(refilled); got != "b1=3 b2=0 b3=0" {
		t.Fatalf("after b1's 3 connections closed, 3 new ones went %s, want all to b1", got)
	}
}

func testMaxConnections(t *testing.T, f Flavor) {
	svc := webService("maglev", equalPool(false))
	svc.Backends[0].Extra = []string{limitedMaxStr}
	applyFresh(t, f.Config(svc))
	held := holdConnections(t, svc, limitedConns)
	if len(held["b1"]) > 2 {
		t.Fatalf("b1 (%s) holds %d connections: %s", limitedMaxStr, len(held["b1"]), counts(held))
	}
	s := findService(t, list(t), svc.Name)
	b1 := s.Backends[slices.IndexFunc(s.Backends, func(b listedBackend) bool { return b.Address == svc.Backends[0].Address })]
	if full := len(held["b1"]) == 2; full != (b1.State == "overloaded") {
		t.Fatalf("b1 holds %d connections (max 2) and is listed %q", len(held["b1"]), b1.State)
	}
	t.Logf("%d held connections: %s; b1 listed %q with %d connections", limitedConns, counts(held), b1.State, b1.Connections)
}
