package engine

import (
	"reflect"
	"strings"
	"testing"
)

// TestConntrackAlarmWarnsOncePerCrossing: one warning when the fill passes 80%, none while it
// wavers above 70%, the all-clear under 70%, and a warning again at the next crossing.
func TestConntrackAlarmWarnsOncePerCrossing(t *testing.T) {
	var a conntrackAlarm
	var got []string
	for _, count := range []uint64{0, 500, 799, 800, 900, 790, 810, 701, 699, 650, 850, 1000} {
		if ev, ok := a.note(count, 1000); ok {
			got = append(got, ev.Type)
		}
	}
	want := []string{EventConntrackHigh, EventConntrackNormal, EventConntrackHigh}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	if _, ok := a.note(5, 0); ok {
		t.Fatal("an event without a maximum (conntrack not loaded)")
	}
}

// TestConntrackWarningSaysTheNumbers: the warning names the fill, the count and the maximum.
func TestConntrackWarningSaysTheNumbers(t *testing.T) {
	var a conntrackAlarm
	ev, ok := a.note(220000, 262144)
	if !ok || !strings.HasPrefix(ev.Message, "conntrack table 84% full: 220000 of 262144 entries") {
		t.Fatalf("warning %q", ev.Message)
	}
}
