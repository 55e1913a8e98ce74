package ebpf

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/plan"
)

// twoServicesOneMore is twoServices with one more backend in web.
var twoServicesOneMore = strings.Replace(twoServices, "        weight: 0\n", "        weight: 0\n      - address: 10.91.2.14\n        port: 8080\n", 1)

// committedApply applies p with a Datapath of its own (a one-shot process) and returns what it
// committed.
func (r *rig) committedApply(p *plan.Plan) Committed {
	r.t.Helper()
	d := r.datapath(Options{})
	r.apply(d, p)
	c, ok := d.Committed()
	if !ok {
		r.t.Fatal("an Apply that succeeded committed nothing")
	}
	if err := d.Close(); err != nil {
		r.t.Fatal(err)
	}
	return c
}

// restored returns a Datapath that Restore started from p as committed in c, or fails the test.
func (r *rig) restored(c Committed, p *plan.Plan) *Datapath {
	r.t.Helper()
	d := r.datapath(Options{})
	held, err := d.Restore(c, p)
	if err != nil || !held {
		r.t.Fatalf("Restore of the last apply: %v, %v; want true", held, err)
	}
	return d
}

// TestRestoredApplyWritesWhatAReadBackWould starts a second process from the first one's apply:
// it loads no program (the links run it), and leaves the maps as an apply that read them all back
// would: an apply reading them back afterwards finds nothing to write.
func TestRestoredApplyWritesWhatAReadBackWould(t *testing.T) {
	r := newRig(t)
	before, after := planFromYAML(t, twoServices), planFromYAML(t, twoServicesOneMore)
	d := r.restored(r.committedApply(before), before)
	if writes := r.apply(d, after); writes == 0 {
		t.Fatal("the restored apply of one more backend wrote nothing")
	}
	if d.prog != nil {
		t.Error("the restored apply loaded the program, which the links already ran")
	}
	if _, ok := d.Committed(); !ok {
		t.Error("the restored apply committed nothing")
	}
	if writes := r.apply(r.datapath(Options{}), after); writes != 0 {
		t.Errorf("an apply reading the maps back wrote %d entries after the restored one, want 0", writes)
	}
	if st, _, err := r.datapath(Options{}).ServiceStatus(context.Background(), "web"); err != nil || len(st.Backends) != 4 {
		t.Errorf("web reads back with %d backends (%v), want 4", len(st.Backends), err)
	}
}

// TestRestoredApplyAttachesMissingLinks restores over maps whose links are gone: the apply loads
// the program and attaches it again.
func TestRestoredApplyAttachesMissingLinks(t *testing.T) {
	r := newRig(t)
	p := planFromYAML(t, twoServices)
	c := r.committedApply(p)
	if err := os.RemoveAll(filepath.Join(r.pin, linksDir)); err != nil {
		t.Fatal(err)
	}
	d := r.restored(c, p)
	r.apply(d, p)
	if d.prog == nil {
		t.Fatal("the restored apply attached no program where no link ran it")
	}
	if info := r.linkInfo("veth0-tc"); info.Program != progIDOf(t, d.prog) {
		t.Errorf("the link runs program %d, want %d", info.Program, progIDOf(t, d.prog))
	}
}

// TestRestoreRefusesChangedMaps refuses the last apply once maps were written since (another
// process's Apply), made anew (a flush) or are asked for with other options: the next Apply reads
// the maps back.
func TestRestoreRefusesChangedMaps(t *testing.T) {
	r := newRig(t)
	p, other := planFromYAML(t, twoServices), planFromYAML(t, twoServicesOneMore)
	c := r.committedApply(p)
	r.committedApply(other)
	flushed := r.committedApply(p)
	if err := r.datapath(Options{}).Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	resized := r.committedApply(p)
	resized.Sizes.Flows = 1 << 16
	for name, c := range map[string]Committed{"written since": c, "flushed since": flushed, "other sizes": resized} {
		d := r.datapath(Options{})
		if held, err := d.Restore(c, p); err != nil || held {
			t.Errorf("%s: Restore %v, %v; want false", name, held, err)
		}
		if d.restored != nil {
			t.Errorf("%s: a refused Restore left a state to start from", name)
		}
	}
}

// TestRestoredApplyRepairsAContradictedService restores over maps whose records someone else
// changed without an Apply (a backend's weight in backend_meta): the service whose records no
// longer match the plan is programmed again, as after a read-back.
func TestRestoredApplyRepairsAContradictedService(t *testing.T) {
	r := newRig(t)
	p := planFromYAML(t, twoServices)
	c := r.committedApply(p)
	d := r.restored(c, p)
	st, err := readState(d.maps)
	if err != nil {
		t.Fatal(err)
	}
	b := st.services["web"].backends["10.91.2.12:8080"]
	rec := b.rec
	rec.Weight = 7
	if err := d.maps.BackendMeta.Put(b.id, rec); err != nil {
		t.Fatal(err)
	}
	if writes := r.apply(d, p); writes == 0 {
		t.Fatal("the restored apply left the changed record as it was")
	}
	if writes := r.apply(r.datapath(Options{}), p); writes != 0 {
		t.Errorf("an apply reading the maps back wrote %d entries after the repair, want 0", writes)
	}
}
