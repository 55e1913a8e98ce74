package api

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/engine"
)

func TestDrainPublishesDrained(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.dp.SetActiveFlows("web", "10.0.0.1:8080", 3)

	drain, _, err := f.client.Drain(ctx, "web", "10.0.0.1:8080", time.Hour, false)
	if err != nil {
		t.Fatal(err)
	}
	if drain.State != engine.DrainDraining || drain.ActiveFlows != 3 || drain.PreviousWeight != 1 {
		t.Fatalf("Drain = %+v, want draining with 3 active flows", drain)
	}
	drains, err := f.client.Drains(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(drains) != 1 || drains[0].Backend != "10.0.0.1:8080" {
		t.Fatalf("Drains = %+v", drains)
	}
	view, err := f.client.Backend(ctx, "web", "10.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if view.Weight != 0 || view.State != engine.DrainDraining {
		t.Fatalf("draining backend = %+v, want weight 0, draining", view)
	}

	f.dp.SetActiveFlows("web", "10.0.0.1:8080", 0)
	waitForEvent(t, f.client, engine.EventDrained, "10.0.0.1:8080")
	f.settle(t)
}

func TestDrainRejects(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for _, tc := range []struct {
		backend string
		timeout string
		status  int
		field   string
	}{
		{"10.0.0.9:8080", "", http.StatusNotFound, ""},
		{"10.0.0.x", "", http.StatusBadRequest, "backend"},
		{"10.0.0.1:8080", `{"timeout": "25h"}`, http.StatusBadRequest, "timeout"},
		{"10.0.0.1:8080", `{"timeout": "0s"}`, http.StatusBadRequest, "timeout"},
		{"10.0.0.1:8080", `{"timeout": 300}`, http.StatusBadRequest, "timeout"},
	} {
		code, body := f.do(t, http.MethodPost, backendURL("web", tc.backend)+"/drain", mediaJSON, []byte(tc.timeout))
		if e := decodeError(t, body); code != tc.status || e.Field != tc.field {
			t.Errorf("drain %s with %q = %d %s, want %d on %q", tc.backend, tc.timeout, code, body, tc.status, tc.field)
		}
	}
	if drains, err := f.client.Drains(ctx); err != nil || len(drains) != 0 {
		t.Fatalf("Drains = %+v, %v; want none", drains, err)
	}
}

// waitForEvent long-polls the events until one of the type about backend arrives.
func waitForEvent(t *testing.T, c *Client, kind, backend string) engine.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var since uint64
	for {
		events, err := c.Events(ctx, since, 5*time.Second)
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Fatalf("no %s event for %s", kind, backend)
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events {
			if e.Type == kind && e.Backend == backend {
				return e
			}
			since = e.ID
		}
	}
}
