package engine

import (
	"context"
	"slices"
	"testing"

	"github.com/sluicelb/sluice/internal/testutil"
)

// backendChecks has backends checked their own way: one by icmp in a service without a check,
// one by exec in a service checked by tcp.
const backendChecks = `
services:
  - name: web
    vip: 10.0.0.1
    port: 80
    backends:
      - address: 10.0.1.1
      - address: 10.0.1.2
        health_check: {type: icmp, on_failure: reset}
  - name: api
    vip: 10.0.0.1
    port: 8080
    health_check: {type: tcp}
    backends:
      - address: 10.0.1.1
      - address: 10.0.1.3
        health_check: {type: exec, command: [/usr/local/bin/check, "{address}"]}
`

func TestBackendsCheckedTheirOwnWay(t *testing.T) {
	h := start(t, backendChecks, Options{})
	h.prober.mu.Lock()
	var got []string
	for _, p := range h.prober.probes {
		got = append(got, string(p.Check.Type)+" "+p.Target.String())
	}
	h.prober.mu.Unlock()
	slices.Sort(got)
	want := []string{"exec 10.0.1.3:8080", "icmp 10.0.1.2:80", "tcp 10.0.1.1:8080"}
	if !slices.Equal(got, want) {
		t.Fatalf("probes %q, want %q", got, want)
	}

	// The service has no check: the fall reads on_failure from the backend's own.
	h.prober.flip("10.0.1.2:80", false)
	testutil.Eventually(t, "down applied", func() bool { return h.weights("web")["10.0.1.2:80"] == 0 })
	views, err := h.Services(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	web := views[slices.IndexFunc(views, func(v ServiceView) bool { return v.Name == "web" })]
	if b1, b2 := web.Backends[0], web.Backends[1]; b1.Health != "unchecked" || b2.Health != "down" {
		t.Fatalf("web's backends: health %q and %q, want unchecked and down", b1.Health, b2.Health)
	}
}
