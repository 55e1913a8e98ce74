package ebpf

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// TestWatchPinsRemovedPinsAgain: with every pin removed, the program stays attached and its maps
// (so its flows) are pinned again, the same maps, and the removal is reported.
func TestWatchPinsRemovedPinsAgain(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	r.apply(d, planFromYAML(t, oneService))
	reports := watch(t, d)
	if err := os.RemoveAll(r.pin); err != nil {
		t.Fatal(err)
	}
	what := waitReport(t, reports)
	for _, want := range []string{"pin " + filepath.Join(r.pin, sluiceMapFlows) + " removed", "pin " + filepath.Join(r.pin, linksDir, "veth0-tc") + " removed"} {
		if !strings.Contains(what, want) {
			t.Errorf("report %q does not say %q", what, want)
		}
	}
	if strings.Contains(what, "failed") {
		t.Errorf("report %q: pinning again failed", what)
	}
	pinned, err := ebpf.LoadPinnedMap(filepath.Join(r.pin, sluiceMapFlows), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pinned.Close()
	if !sameMap(pinned, d.maps.Flows) {
		t.Error("the flows pin holds another map than the one the program uses")
	}
	if info := r.linkInfo("veth0-tc"); info.Program != progIDOf(t, d.prog) {
		t.Errorf("the pinned link runs program %d, not the loaded %d", info.Program, progIDOf(t, d.prog))
	}
	d.Resync() // what the engine does on a report: all is in place again
	r.apply(d, planFromYAML(t, oneService))
	if got := r.pinnedLinks(); !slices.Equal(got, []string{"veth0-tc"}) {
		t.Errorf("pinned links %v after the repair, want [veth0-tc]", got)
	}
}

// TestWatchReportsADetachedLink: a link someone else detached is reported, and the Resync and
// Apply that follow attach the program again.
func TestWatchReportsADetachedLink(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	r.apply(d, planFromYAML(t, oneService))
	reports := watch(t, d)
	l, err := link.LoadPinnedLink(filepath.Join(r.pin, linksDir, "veth0-tc"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Detach(); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if what := waitReport(t, reports); what != "link veth0-tc detached" {
		t.Errorf("report %q, want link veth0-tc detached", what)
	}
	d.Resync()
	r.apply(d, planFromYAML(t, oneService))
	if n := r.tcxPrograms("veth0"); n != 1 {
		t.Errorf("%d programs at tcx ingress of veth0 after the repair, want 1", n)
	}
}

// watch starts d.Watch until the test ends and returns its reports.
func watch(t *testing.T, d *Datapath) <-chan string {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	reports := make(chan string, 16)
	if err := d.Watch(ctx, func(what string) { reports <- what }); err != nil {
		t.Fatal(err)
	}
	return reports
}

func waitReport(t *testing.T, reports <-chan string) string {
	t.Helper()
	select {
	case what := <-reports:
		return what
	case <-time.After(10 * time.Second):
		t.Fatal("no report of the change within 10s")
		return ""
	}
}
