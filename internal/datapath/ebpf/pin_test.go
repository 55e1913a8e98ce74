package ebpf

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPinPathMustBeOnBPFFS refuses a pin path that is not on a BPF filesystem, and makes nothing.
func TestPinPathMustBeOnBPFFS(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sluice")
	err := preparePinPath(dir)
	if err == nil || !strings.Contains(err.Error(), "not on a BPF filesystem") {
		t.Errorf("preparePinPath(%s) = %v", dir, err)
	}
	if pathExists(dir) {
		t.Errorf("%s was made", dir)
	}
}

// TestMapSizes makes the maps with the configured sizes; a restart asking for other sizes is
// refused with what to do, and leaves the pinned maps and their flows alone, while read-only
// opens (list, flush) take the pinned maps whatever their sizes.
func TestMapSizes(t *testing.T) {
	r := newRig(t)
	sizes := MapSizes{Flows: 4096, MaglevSlots: 8192}
	d := r.datapath(Options{Sizes: sizes})
	r.apply(d, planFromYAML(t, oneService))
	for name, m := range map[string]interface{ MaxEntries() uint32 }{"flows": d.maps.Flows, "replies": d.maps.Replies, "maglev": d.maps.Maglev} {
		if want := sizes.resizable()[name]; m.MaxEntries() != want {
			t.Errorf("%s holds %d entries, want %d", name, m.MaxEntries(), want)
		}
	}
	ids := idsOf(t, d)
	flowAt(t, d.maps, 1, ids.of(t, "web"), ids.of(t, "web/10.91.2.11"), monotonicNow())

	other := r.datapath(Options{Sizes: MapSizes{Flows: 8192}})
	_, err := other.apply(context.Background(), planFromYAML(t, oneService))
	if err == nil || !strings.Contains(err.Error(), "ebpf.max_flows") || !strings.Contains(err.Error(), "sluice flush") {
		t.Fatalf("restarting with other sizes: %v; want a refusal naming the sizes and sluice flush", err)
	}
	if f, _ := countFlows(t, d.maps, ids.of(t, "web/10.91.2.11")); f != 1 {
		t.Errorf("the refused restart left %d flows, want the 1 there was", f)
	}
	if st, err := r.datapath(Options{}).Status(context.Background()); err != nil || len(st) != 1 {
		t.Errorf("Status over maps of other sizes: %+v, %v", st, err)
	}
}

// TestPinsMadeBeforeAddedMaps adopts the pins of a version before if_macs and the session maps,
// every map but those: reading them needs none of them, and the next apply makes and pins them,
// keeps the flows and has the link run a program that reads the new maps.
func TestPinsMadeBeforeAddedMaps(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{Attach: AttachXDP})
	r.apply(d, planFromYAML(t, oneService))
	ids := idsOf(t, d)
	backend := ids.of(t, "web/10.91.2.11")
	flowAt(t, d.maps, 1, ids.of(t, "web"), backend, monotonicNow())
	errs := []error{d.Close()}
	for name := range addedMaps {
		errs = append(errs, os.Remove(filepath.Join(r.pin, name)))
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if st, err := r.datapath(Options{}).Status(context.Background()); err != nil || len(st) != 1 {
		t.Fatalf("Status over pins without the added maps: %+v, %v", st, err)
	}
	restarted := r.datapath(Options{Attach: AttachXDP})
	r.apply(restarted, planFromYAML(t, oneService))
	if f, _ := countFlows(t, restarted.maps, backend); f != 1 {
		t.Errorf("the restart left %d flows, want the 1 there was", f)
	}
	if got, want := r.pinnedMACs(), macsOf(t, "veth0"); !maps.Equal(got, want) {
		t.Errorf("if_macs %v, want %v", got, want)
	}
	for name := range addedMaps {
		if _, err := os.Stat(filepath.Join(r.pin, name)); err != nil {
			t.Errorf("the restart did not pin %s again: %v", name, err)
		}
	}
	if info := r.linkInfo("veth0-xdp"); info.Program != progIDOf(t, restarted.prog) {
		t.Errorf("the link runs program %d, want the loaded %d, which reads the new if_macs", info.Program, progIDOf(t, restarted.prog))
	}
}
