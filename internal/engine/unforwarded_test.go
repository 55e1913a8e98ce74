package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/datapath"
)

// TestUnforwardedAlarmReportsGrowthAtMostOnceAMinute: the first reading is the baseline (drops
// from before the daemon started make no event); growth makes one event naming the service, the
// reason and the sysctl; more growth within the minute waits, and is then reported with all that
// grew meanwhile; no growth, no event.
func TestUnforwardedAlarmReportsGrowthAtMostOnceAMinute(t *testing.T) {
	var a unforwardedAlarm
	start := time.Unix(1000, 0)
	reading := func(fwd, route uint64) map[string]datapath.Unforwarded {
		return map[string]datapath.Unforwarded{"web": {ForwardingDisabled: fwd}, "dns": {NoRoute: route}}
	}
	if _, ok := a.note(reading(50, 0), start); ok {
		t.Fatal("the first reading made an event")
	}
	ev, ok := a.note(reading(60, 0), start.Add(5*time.Second))
	if !ok || ev.Type != EventPacketsUnforwarded || !strings.Contains(ev.Message, "web: 10 forwarding disabled (sysctl net.ipv4.ip_forward") || strings.Contains(ev.Message, "dns") {
		t.Fatalf("growth: %+v, %v", ev, ok)
	}
	if _, ok := a.note(reading(70, 2), start.Add(30*time.Second)); ok {
		t.Fatal("a second event within the minute")
	}
	ev, ok = a.note(reading(80, 3), start.Add(70*time.Second))
	if !ok || !strings.Contains(ev.Message, "dns: 3 no route") || !strings.Contains(ev.Message, "web: 20 forwarding disabled") {
		t.Fatalf("after the minute: %+v, %v", ev, ok)
	}
	if _, ok := a.note(reading(80, 3), start.Add(200*time.Second)); ok {
		t.Fatal("an event without growth")
	}
}
