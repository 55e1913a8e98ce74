package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicelb/sluice/internal/api"
	"github.com/sluicelb/sluice/internal/engine"
)

// eventDaemon answers /v1/events from a list a test changes, or fails while down.
type eventDaemon struct {
	mu     sync.Mutex
	events []engine.Event
	down   bool
	asked  chan uint64
}

func (d *eventDaemon) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	since, _ := strconv.ParseUint(r.URL.Query().Get("since"), 10, 64)
	d.mu.Lock()
	down := d.down
	var out []engine.Event
	for _, e := range d.events {
		if e.ID > since {
			out = append(out, e)
		}
	}
	d.mu.Unlock()
	if d.asked != nil {
		d.asked <- since
	}
	if down {
		http.Error(w, "daemon stopping", http.StatusServiceUnavailable)
		return
	}
	_ = json.NewEncoder(w).Encode(append([]engine.Event{}, out...))
}

func testEvent(id uint64, typ, service, message string) engine.Event {
	return engine.Event{ID: id, Time: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Type: typ, Service: service, Message: message}
}

func TestEventsTable(t *testing.T) {
	d := &eventDaemon{events: []engine.Event{
		testEvent(1, engine.EventConfigChanged, "", "applied"),
		{ID: 2, Time: time.Date(2025, 1, 2, 3, 4, 6, 0, time.UTC), Type: engine.EventBackendDown, Service: "web", Backend: "10.0.0.1:80", Message: "connect: refused"},
	}}
	srv := httptest.NewServer(d)
	defer srv.Close()
	var out, errOut bytes.Buffer
	if err := followEvents(context.Background(), api.NewTCPClient(srv.URL, ""), false, "table", &out, &errOut); err != nil {
		t.Fatal(err)
	}
	want := "" +
		"TIME                       TYPE                SERVICE           BACKEND                MESSAGE\n" +
		"2025-01-02T03:04:05Z       config_changed      -                 -                      applied\n" +
		"2025-01-02T03:04:06Z       backend_down        web               10.0.0.1:80            connect: refused\n"
	if out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out.String(), want)
	}
	assertNoTrailingSpace(t, out.String())
}

func TestEventsJSONOnePerLine(t *testing.T) {
	d := &eventDaemon{events: []engine.Event{testEvent(1, engine.EventBackendUp, "web", "ok"), testEvent(2, engine.EventDrained, "web", "done")}}
	srv := httptest.NewServer(d)
	defer srv.Close()
	var out bytes.Buffer
	if err := followEvents(context.Background(), api.NewTCPClient(srv.URL, ""), false, "json", &out, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines, got %q", out.String())
	}
	for i, l := range lines {
		var e engine.Event
		if err := json.Unmarshal([]byte(l), &e); err != nil || e.ID != uint64(i+1) {
			t.Fatalf("line %d %q: %v (id %d)", i, l, err, e.ID)
		}
	}
}

// A followed daemon that stops and comes back with its ids begun again has its new events
// printed, with notes on stderr and no error, even those whose ids the old daemon had used.
func TestEventsFollowAcrossRestart(t *testing.T) {
	d := &eventDaemon{events: []engine.Event{testEvent(1, engine.EventBackendUp, "web", "first"), testEvent(2, engine.EventBackendUp, "web", "second")}, asked: make(chan uint64)}
	srv := httptest.NewServer(d)
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- followEvents(ctx, api.NewTCPClient(srv.URL, ""), true, "json", &out, &errOut) }()
	<-d.asked // the first read
	<-d.asked // waiting after event 2
	d.mu.Lock()
	d.down = true
	d.mu.Unlock()
	<-d.asked // fails: lost
	d.mu.Lock()
	d.down, d.events = false, []engine.Event{testEvent(1, engine.EventConfigChanged, "", "restarted"), testEvent(2, engine.EventBackendUp, "web", "again")}
	d.mu.Unlock()
	for since := range d.asked {
		if since == 2 { // waiting after the new daemon's event 2 (while lost it asks from 0)
			break
		}
	}
	cancel()
	go func() {
		for range d.asked {
		}
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	close(d.asked)
	if got := strings.Count(out.String(), "\n"); got != 4 || !strings.Contains(out.String(), "restarted") {
		t.Fatalf("want the 2 events and the restarted daemon's 2, got %q", out.String())
	}
	if !strings.Contains(errOut.String(), "lost the daemon") || !strings.Contains(errOut.String(), "answers again") {
		t.Fatalf("stderr: %q", errOut.String())
	}
}

func assertNoTrailingSpace(t *testing.T, s string) {
	t.Helper()
	for i, l := range strings.Split(s, "\n") {
		if strings.TrimRight(l, " \t") != l {
			t.Fatalf("line %d has trailing whitespace: %q", i+1, l)
		}
	}
}

// TestEventRowKeepsAMessageOnItsRow: a reload_failed message holds one error per line; the table
// keeps it on the event's row.
func TestEventRowKeepsAMessageOnItsRow(t *testing.T) {
	row := eventRow("2026-11-24T05:39:49Z", "reload_failed", "", "", "f.yaml:6: a\nf.yaml:11: b")
	if strings.Contains(row, "\n") || !strings.HasSuffix(row, "f.yaml:6: a | f.yaml:11: b") {
		t.Errorf("row %q", row)
	}
}

// TestEventsYAMLIsAList: -o yaml prints one YAML sequence of the events (not mappings back to
// back, which no YAML reader takes as one document), and an empty one when there are none.
func TestEventsYAMLIsAList(t *testing.T) {
	for _, events := range [][]engine.Event{
		{testEvent(1, engine.EventBackendUp, "web", "ok"), testEvent(2, engine.EventDrained, "web", "done"), testEvent(3, engine.EventBackendDown, "db", "refused")},
		nil,
	} {
		srv := httptest.NewServer(&eventDaemon{events: events})
		var out bytes.Buffer
		if err := followEvents(context.Background(), api.NewTCPClient(srv.URL, ""), false, "yaml", &out, &out); err != nil {
			t.Fatal(err)
		}
		srv.Close()
		var got []map[string]any
		if err := yaml.Unmarshal(out.Bytes(), &got); err != nil || got == nil || len(got) != len(events) {
			t.Fatalf("-o yaml of %d events does not parse as a list of them: %v, %v\n%s", len(events), got, err, out.String())
		}
		for i, e := range got {
			if e["type"] != events[i].Type || e["id"] != int(events[i].ID) {
				t.Errorf("item %d = %v, want event %d (%s)", i, e, events[i].ID, events[i].Type)
			}
		}
	}
}
