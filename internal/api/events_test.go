package api

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/engine"
)

func TestEventsLongPoll(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	events, err := f.client.Events(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	if len(events) > 0 {
		last = events[len(events)-1].ID
	}
	quiet, err := f.client.Events(ctx, last, time.Millisecond)
	if err != nil || len(quiet) != 0 {
		t.Fatalf("a long poll with nothing new = %+v, %v; want []", quiet, err)
	}

	type answer struct {
		events []engine.Event
		err    error
	}
	polled := make(chan answer, 1)
	go func() {
		events, err := f.client.Events(ctx, last, MaxEventWait)
		polled <- answer{events, err}
	}()
	if _, err := f.client.SetWeight(ctx, "web", "10.0.0.2:8080", 4, false); err != nil {
		t.Fatal(err)
	}
	got := <-polled
	if got.err != nil {
		t.Fatal(got.err)
	}
	if len(got.events) == 0 || got.events[0].Type != engine.EventConfigChanged || got.events[0].ID <= last {
		t.Fatalf("long poll = %+v, want the config_changed event", got.events)
	}
}

func TestEventsRejectsBadQueries(t *testing.T) {
	f := newFixture(t)
	for query, field := range map[string]string{"since=-1": "since", "since=x": "since", "wait=2m": "wait", "wait=soon": "wait"} {
		code, body := f.do(t, http.MethodGet, "/v1/events?"+query, "", nil)
		if e := decodeError(t, body); code != http.StatusBadRequest || e.Field != field {
			t.Errorf("GET /v1/events?%s = %d %s, want 400 on %s", query, code, body, field)
		}
	}
}
