package ebpf

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
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
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	for name, m := range map[string]*ebpf.Map{"flows": d.maps.Flows, "replies": d.maps.Replies, "maglev": d.maps.Maglev} {
		want := sizes.resizable()[name]
		if m.Flags()&noCommonLRU != 0 {
			want = perCPUEntries(want, uint32(cpus)) // a multiple of the CPUs, as the kernel makes it
		}
		if m.MaxEntries() != want {
			t.Errorf("%s holds %d entries, want %d", name, m.MaxEntries(), want)
		}
	}
	ids := idsOf(t, d)
	flowAt(t, d.maps, 1, ids.of(t, "web"), ids.of(t, "web/10.91.2.11"), monotonicNow())

	other := r.datapath(Options{Sizes: MapSizes{Flows: 8192}})
	_, err = other.apply(context.Background(), planFromYAML(t, oneService))
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

// TestKernelMapsAreThePinnedMaps has a place in kernelMaps for each map the collection pins, by
// its name, and leaves the program's unpinned scratch maps to the program.
func TestKernelMapsAreThePinnedMaps(t *testing.T) {
	spec, err := collectionSpec("", MapSizes{})
	if err != nil {
		t.Fatal(err)
	}
	fields := (&kernelMaps{}).fields()
	for name, ms := range spec.Maps {
		if _, ok := fields[name]; !ok && ms.Pinning == ebpf.PinByName {
			t.Errorf("pinned map %s has no place in kernelMaps", name)
		}
	}
	for name := range fields {
		if spec.Maps[name] == nil {
			t.Errorf("kernelMaps has a place for %s, which the collection lacks", name)
		}
	}
	for name := range firstMaps {
		if spec.Maps[name] == nil || spec.Maps[name].Pinning != ebpf.PinByName {
			t.Errorf("first map %s is not a pinned map of the collection", name)
		}
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
	var added []string
	for name := range d.maps.byName() {
		if !firstMaps[name] {
			added = append(added, name)
		}
	}
	errs := []error{d.Close()}
	for _, name := range added {
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
	for _, name := range added {
		if _, err := os.Stat(filepath.Join(r.pin, name)); err != nil {
			t.Errorf("the restart did not pin %s again: %v", name, err)
		}
	}
	if info := r.linkInfo("veth0-xdp"); info.Program != progIDOf(t, restarted.prog) {
		t.Errorf("the link runs program %d, want the loaded %d, which reads the new if_macs", info.Program, progIDOf(t, restarted.prog))
	}
}

// TestPinsWithCommonLRU adopts flows and replies pinned by a version before per-CPU LRU lists,
// with the common list they were made with: reads, which and a restart keep their flows, and a
// flush makes them anew with per-CPU lists.
func TestPinsWithCommonLRU(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	r.apply(d, planFromYAML(t, oneService))
	ids := idsOf(t, d)
	backend := ids.of(t, "web/10.91.2.11")
	flowAt(t, d.maps, 1, ids.of(t, "web"), backend, monotonicNow())
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{sluiceMapFlows, sluiceMapReplies} {
		pinCommonLRU(t, filepath.Join(r.pin, name))
	}

	if st, err := r.datapath(Options{}).Status(context.Background()); err != nil || len(st) != 1 {
		t.Fatalf("Status over common-LRU pins: %+v, %v", st, err)
	}
	restarted := r.datapath(Options{})
	r.apply(restarted, planFromYAML(t, oneService))
	if f, rep := countFlows(t, restarted.maps, backend); f != 1 || rep != 1 {
		t.Errorf("the restart left %d flows and %d replies, want the 1 and 1 there were", f, rep)
	}
	for name, m := range map[string]*ebpf.Map{"flows": restarted.maps.Flows, "replies": restarted.maps.Replies} {
		if m.Flags()&noCommonLRU != 0 {
			t.Errorf("the restart made %s anew (flags %#x), want the pinned one adopted", name, m.Flags())
		}
	}
	client, vip := netip.MustParseAddrPort("10.91.1.1:40001"), netip.MustParseAddrPort("10.91.9.100:80")
	if c, err := restarted.Which("tcp", vip, client); err != nil || !c.Tracked {
		t.Errorf("which over common-LRU pins: %+v, %v; want the tracked flow", c, err)
	}

	if err := restarted.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	flushed := r.datapath(Options{})
	r.apply(flushed, planFromYAML(t, oneService))
	for name, m := range map[string]*ebpf.Map{"flows": flushed.maps.Flows, "replies": flushed.maps.Replies} {
		if m.Flags()&noCommonLRU == 0 {
			t.Errorf("after a flush %s has flags %#x, want per-CPU lists", name, m.Flags())
		}
	}
}

// pinCommonLRU replaces the per-CPU LRU map pinned at path by a copy made with the common list,
// as a version before per-CPU lists pinned it, entries included.
func pinCommonLRU(t *testing.T, path string) {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	old, err := ebpf.NewMap(&ebpf.MapSpec{
		Name: filepath.Base(path), Type: m.Type(), KeySize: m.KeySize(), ValueSize: m.ValueSize(),
		MaxEntries: m.MaxEntries(), Flags: m.Flags() &^ noCommonLRU,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	key, value := make([]byte, m.KeySize()), make([]byte, m.ValueSize())
	it := m.Iterate()
	for it.Next(&key, &value) {
		if err := old.Put(key, value); err != nil {
			t.Fatal(err)
		}
	}
	if err := errors.Join(it.Err(), os.Remove(path), old.Pin(path)); err != nil {
		t.Fatal(err)
	}
}
