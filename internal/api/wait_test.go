package api

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/engine"
)

// TestChangesReturnOnceApplied: a listing right after a change shows it as the datapath holds
// it, never half applied; a failed apply answers 500 with its error; wait=false answers at once.
func TestChangesReturnOnceApplied(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for i := range 20 {
		weight := 1 + i%5
		if _, err := f.client.AddBackend(ctx, "web", config.Backend{Address: config.IPOf("10.0.0.9"), Port: 8080, Weight: &weight}, false); err != nil {
			t.Fatal(err)
		}
		view, err := f.client.Backend(ctx, "web", "10.0.0.9:8080")
		if err != nil {
			t.Fatal(err)
		}
		if view.ProgrammedWeight != weight || view.Share == 0 {
			t.Fatalf("right after adding it, the backend is programmed with weight %d and share %.3f, want weight %d and a share", view.ProgrammedWeight, view.Share, weight)
		}
		if _, err := f.client.RemoveBackend(ctx, "web", "10.0.0.9:8080", false); err != nil {
			t.Fatal(err)
		}
		if services, err := f.client.Services(ctx); err != nil || math.Abs(sharesOf(services, "web")-1) > 1e-9 {
			t.Fatalf("right after removing it, web's shares sum to %v: %v", sharesOf(services, "web"), err)
		}
	}

	f.dp.FailWith(errors.New("the table is full"))
	var apiErr *Error
	_, err := f.client.SetWeight(ctx, "web", "10.0.0.1:8080", 4, false)
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusInternalServerError || apiErr.Message != "the change is the running config, but the datapath failed to apply the change: the table is full; it is retried (see sluice events)" {
		t.Fatalf("a change the datapath refused: %v", err)
	}
	f.client.NoWait = true
	if _, err := f.client.SetWeight(ctx, "web", "10.0.0.1:8080", 5, false); err != nil {
		t.Fatalf("wait=false waited for an apply that fails: %v", err)
	}
	f.dp.FailWith(nil)
	f.client.NoWait = false
	if _, err := f.client.SetWeight(ctx, "web", "10.0.0.1:8080", 6, false); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if w := f.dp.Plan().Services[1].Backends[0].Weight; w != 1 {
		t.Fatalf("right after a reload the datapath holds weight %d, want the file's 1", w)
	}
}

// sharesOf sums the shares of a service's backends.
func sharesOf(services []engine.ServiceView, name string) float64 {
	var sum float64
	for _, s := range services {
		if s.Name == name {
			for _, b := range s.Backends {
				sum += b.Share
			}
		}
	}
	return sum
}

// TestChangeWhileStoppingIsToldTheTruth checks that a change the datapath will not apply, as the
// daemon is stopping, is answered at once with 503 saying so, not left waiting without an answer
// or told that it is retried.
func TestChangeWhileStoppingIsToldTheTruth(t *testing.T) {
	f := newFixture(t)
	f.stop()
	_, err := f.client.RemoveService(context.Background(), "dns", false)
	var answer *Error
	if !errors.As(err, &answer) || answer.Status != http.StatusServiceUnavailable || !strings.Contains(answer.Message, "stopped before the datapath applied") {
		t.Fatalf("%v, want 503 saying the daemon stopped before applying the change", err)
	}
}
