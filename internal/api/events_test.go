package api

import (
	"context"
	"net"
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

// A server shutting down ends a follower's long poll with a clean empty answer rather than
// waiting it out, and the follower reaches the server that takes its place.
func TestShutdownEndsEventsLongPoll(t *testing.T) {
	f := newFixture(t)
	polling := make(chan struct{}, 1)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/events" {
			polling <- struct{}{}
		}
		f.handler.ServeHTTP(w, r)
	})
	serve := func(addr string) (*http.Server, string) {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		srv := NewServer(handler)
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		return srv, ln.Addr().String()
	}
	srv, addr := serve("127.0.0.1:0")
	client := NewTCPClient("http://"+addr, "")
	events, err := client.Events(context.Background(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	<-polling
	var last uint64
	if len(events) > 0 {
		last = events[len(events)-1].ID
	}

	// The follower's context stays live throughout: only the shutdown can end its poll before
	// its wait (MaxEventWait) runs out.
	type answer struct {
		events []engine.Event
		err    error
	}
	polled := make(chan answer, 1)
	go func() {
		events, err := client.Events(context.Background(), last, MaxEventWait)
		polled <- answer{events, err}
	}()
	<-polling
	shutdown, cancel := context.WithTimeout(context.Background(), MaxEventWait/2)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		t.Fatalf("Shutdown with a follower connected: %v, want it to end the follower's poll", err)
	}
	if got := <-polled; got.err != nil || len(got.events) != 0 {
		t.Fatalf("the follower's poll across the shutdown = %+v, %v; want a clean []", got.events, got.err)
	}

	serve(addr)
	if _, err := client.Events(context.Background(), last, time.Millisecond); err != nil {
		t.Fatalf("the follower on the next server: %v", err)
	}
	<-polling
}
