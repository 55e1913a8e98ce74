package engine

import (
	"fmt"
	"testing"
)

// A failure repeated more often than the log holds events is kept once, with a count, and does
// not push the other events out of the log.
func TestRepeatedEventsAreCoalesced(t *testing.T) {
	l := newEventLog()
	l.publish(Event{Type: EventBackendDown, Service: "web", Backend: "10.0.0.1:80", Message: "connect refused"})
	first := l.publish(Event{Type: EventBGPFailed, Message: "bgp: listen_port: 179 is taken"})
	for i := range 3 * eventLogSize {
		l.publish(Event{Type: EventBGPFailed, Message: "bgp: listen_port: 179 is taken"})
		if i == eventLogSize {
			l.publish(Event{Type: EventBGPFailed, Message: "bgp: another failure"})
		}
	}
	events, _ := l.since(0)
	if len(events) != 3 {
		t.Fatalf("%d events kept, want 3: %+v", len(events), events)
	}
	down, other, failed := events[0], events[1], events[2]
	if down.Type != EventBackendDown || down.Count != 0 {
		t.Errorf("the backend_down event is gone or counted: %+v", down)
	}
	if other.Message != "bgp: another failure" || other.Count != 0 {
		t.Errorf("the other failure: %+v", other)
	}
	if failed.Count != 3*eventLogSize+1 || !failed.First.Equal(first.Time) || failed.Time.Before(first.Time) || failed.ID <= other.ID {
		t.Errorf("the repeated failure: count %d (want %d), first %v (want %v), time %v, id %d",
			failed.Count, 3*eventLogSize+1, failed.First, first.Time, failed.Time, failed.ID)
	}
	// A follower waiting after the last event it saw is told of the next repeat.
	next := l.publish(Event{Type: EventBGPFailed, Message: "bgp: listen_port: 179 is taken"})
	if got, _ := l.since(failed.ID); len(got) != 1 || got[0].ID != next.ID || got[0].Count != failed.Count+1 {
		t.Errorf("after the repeat a follower sees %+v", got)
	}
}

// Events that differ in any of type, service, backend or message are all kept.
func TestDistinctEventsAreKept(t *testing.T) {
	l := newEventLog()
	for i := range 4 {
		l.publish(Event{Type: EventBackendDown, Service: "web", Backend: fmt.Sprintf("10.0.0.%d:80", i), Message: "down"})
		l.publish(Event{Type: EventBackendUp, Service: "web", Backend: fmt.Sprintf("10.0.0.%d:80", i), Message: "down"})
	}
	if events, _ := l.since(0); len(events) != 8 {
		t.Fatalf("%d events kept, want 8", len(events))
	}
}
