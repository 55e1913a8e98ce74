package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// quorumConns is the number of one-request connections of each check of the quorum test.
const quorumConns = 100

// TestQuorum runs keepalived's quorum in the daemon: b1 and b2 of weight 2 with a tcp check,
// quorum 3 and hysteresis 1 (lost below 2, regained at 4), b3 the sorry server, and quorum_up and
// quorum_down commands that note their service and weight in a file. Stopping b1 (weight 2,
// under the quorum but not under 2) keeps the quorum; stopping b2 too loses it once: the event,
// quorum_down with SLUICE_SERVICE, and new flows on b3. Starting b1 again (weight 2) does not
// regain it: b1 takes no new flows; starting b2 (weight 4) regains it once: the event, quorum_up,
// and new flows back on b1 and b2.
func TestQuorum(t *testing.T) {
	requireLab(t)
	f := nftFlavors[0]
	ran := filepath.Join(t.TempDir(), "quorum-commands")
	note := func(what string) string {
		return fmt.Sprintf(`[sh, -c, 'echo "%s $SLUICE_SERVICE $SLUICE_QUORUM_WEIGHT" >> %s']`, what, ran)
	}
	svc := webService("maglev", pool(false, map[int]int{1: 2, 2: 2}))
	b1, b2, sorry := theLab.BackendAddr(1, false).String(), theLab.BackendAddr(2, false).String(), theLab.BackendAddr(3, false).String()
	svc.Extra = []string{
		"health_check: {type: tcp, interval: 200ms, timeout: 150ms, rise: 1, fall: 1}",
		"quorum: 3", "hysteresis: 1", "quorum_up: " + note("up"), "quorum_down: " + note("down"),
		"fallback: sorry", "sorry_servers: [{address: " + sorry + "}]",
	}
	freshBalancer(t)
	t.Cleanup(func() { flush(t) })
	t.Cleanup(func() { // the backends this test stops, should it stop half-way
		for i := 1; i <= 2; i++ {
			if err := theLab.StartBackend(context.Background(), i); err != nil {
				t.Errorf("restart b%d: %v", i, err)
			}
		}
	})
	d := startDaemon(t, writeConfig(t, "sluice.yaml", f.Config(svc)))

	// q waits until the daemon shows the service's available weight and quorum state, and the
	// kernel the weights of b1, b2 and the sorry server.
	q := func(weight int, quorum string, w1, w2, wSorry int) {
		t.Helper()
		what := fmt.Sprintf("available weight %d, quorum %s, programmed weights b1 %d b2 %d b3 %d", weight, quorum, w1, w2, wSorry)
		waitFor(t, what, 10*time.Second, func() bool {
			v := quorumView(d)
			return v.AvailableWeight == weight && v.Quorum == quorum &&
				d.programmedWeight("web", b1) == w1 && d.programmedWeight("web", b2) == w2 && d.programmedWeight("web", sorry) == wSorry
		})
	}
	// onlyOn checks that new connections reach exactly the backends named.
	onlyOn := func(step string, backends ...string) {
		t.Helper()
		res := hammer(t, workers, quorumConns, func() (string, error) { return httpOnce(svc.Addr()) })
		t.Logf("%s: %v", step, res)
		res.requireNoFailures(t)
		if got := strings.Join(res.Backends(), ","); got != strings.Join(backends, ",") {
			t.Fatalf("%s: new connections reached %v, want %v only", step, res.PerBackend, backends)
		}
	}
	backend := func(i int, up bool) {
		t.Helper()
		change, state := theLab.StopBackend, "down"
		if up {
			change, state = theLab.StartBackend, "up"
		}
		if err := change(context.Background(), i); err != nil {
			t.Fatal(err)
		}
		target := theLab.BackendAddr(i, false).String() + ":80"
		waitFor(t, fmt.Sprintf("b%d %s", i, state), 10*time.Second, func() bool { return d.probeState(target) == state })
	}

	q(4, "held", 2, 2, 0)
	onlyOn("quorum held, weight 4", "b1", "b2")

	backend(1, false)
	q(2, "held", 0, 2, 0)
	onlyOn("b1 down, weight 2: held by the hysteresis", "b2")

	backend(2, false)
	waitFor(t, "the quorum_lost event", 10*time.Second, func() bool { return len(quorumEvents(d)) == 1 })
	q(0, "lost", 0, 0, 1)
	onlyOn("b1 and b2 down: quorum lost", "b3")

	backend(1, true)
	q(2, "lost", 0, 0, 1)
	onlyOn("b1 up, weight 2: still lost by the hysteresis", "b3")

	backend(2, true)
	waitFor(t, "the quorum_regained event", 10*time.Second, func() bool { return len(quorumEvents(d)) == 2 })
	q(4, "held", 2, 2, 0)
	onlyOn("b1 and b2 up, weight 4: quorum regained", "b1", "b2")

	events := quorumEvents(d)
	for _, e := range events {
		t.Logf("event %s %s: %s", e.Type, e.Service, e.Message)
	}
	if len(events) != 2 || events[0].Type != "quorum_lost" || events[1].Type != "quorum_regained" ||
		events[0].Service != "web" || events[1].Service != "web" {
		t.Fatalf("quorum events %+v, want quorum_lost then quorum_regained of web", events)
	}
	want := "down web 0\nup web 4\n"
	var got string
	waitFor(t, "quorum_down and quorum_up run", 10*time.Second, func() bool {
		b, _ := os.ReadFile(ran)
		got = string(b)
		return got == want || strings.Count(got, "\n") >= 2
	})
	if got != want {
		t.Fatalf("the quorum commands wrote %q, want %q (SLUICE_SERVICE, SLUICE_QUORUM_WEIGHT)", got, want)
	}
}

// quorumState is what `sluice list -o json` shows of a service's quorum, and quorumEvent one
// line of `sluice events -o json`: decoded independently of the product's types.
type (
	quorumState struct {
		Name            string `json:"name"`
		AvailableWeight int    `json:"available_weight"`
		Quorum          string `json:"quorum"`
	}
	quorumEvent struct {
		Type    string `json:"type"`
		Service string `json:"service"`
		Message string `json:"message"`
	}
)

// quorumView is the daemon's view of the service web.
func quorumView(d *daemon) quorumState {
	d.t.Helper()
	var services []quorumState
	d.mustJSON(&services, "list")
	for _, s := range services {
		if s.Name == "web" {
			return s
		}
	}
	d.t.Fatalf("service web not listed: %+v", services)
	return quorumState{}
}

// quorumEvents lists the daemon's quorum_lost and quorum_regained events, oldest first.
func quorumEvents(d *daemon) []quorumEvent {
	d.t.Helper()
	r := d.cli("events", "-o", "json")
	if r.Err != nil {
		d.t.Fatalf("sluice events: %v\n%s", r.Err, r.Stderr)
	}
	var out []quorumEvent
	for line := range strings.Lines(r.Stdout) {
		var e quorumEvent
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			d.t.Fatalf("sluice events -o json: %v: %s", err, line)
		}
		if e.Type == "quorum_lost" || e.Type == "quorum_regained" {
			out = append(out, e)
		}
	}
	return out
}
