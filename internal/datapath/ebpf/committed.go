package ebpf

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/sluicelb/sluice/internal/plan"
)

// Every Apply writes a new random token to apply_token, a pinned map of Sluice's own that the
// program never reads, before it writes anything else. A process that kept the token its Apply
// wrote (Committed) knows, while the map holds it, that no Apply of any process changed the maps
// since: a later process can start from what that Apply programmed (Restore) instead of reading
// every map back.
const applyTokenName = "apply_token"

// applyTokenSpec is the spec of apply_token: one 64-bit token.
func applyTokenSpec() *ebpf.MapSpec {
	return &ebpf.MapSpec{Name: applyTokenName, Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1, Pinning: ebpf.PinByName}
}

// writeToken writes a new token to apply_token and returns it.
func writeToken(m *kernelMaps) (uint64, error) {
	if m.ApplyToken == nil {
		return 0, nil // pins made before apply_token, opened for reading only
	}
	token := rand.Uint64() | 1 // never 0, the token of maps no Apply wrote
	if err := m.ApplyToken.Put(uint32(0), token); err != nil {
		return 0, fmt.Errorf("writing %s: %w", applyTokenName, err)
	}
	return token, nil
}

// Committed is what an Apply left in the pinned maps, kept by a process for the next one (sluice
// apply -f without a daemon): the maps by id, the token the Apply wrote and the program its links
// run. It holds no services: the plan that was applied goes with it.
type Committed struct {
	// Boot is the boot's id: map and program ids are unique within one boot only.
	Boot    string
	PinPath string
	Attach  AttachMode
	Sizes   MapSizes
	// Maps are the ids of the pinned maps, by name: maps made anew (a flush) have other ids.
	Maps  map[string]ebpf.MapID
	Token uint64
	// ProgType, ProgTag and ProgMaps identify the program the links run, as runs compares it.
	ProgType ebpf.ProgramType
	ProgTag  string
	ProgMaps []ebpf.MapID
}

// Committed returns what the last Apply left in the maps; false when that is not exactly known
// (no Apply, or a failed one).
func (d *Datapath) Committed() (Committed, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.committed == nil {
		return Committed{}, false
	}
	return *d.committed, true
}

// committedNow describes the maps d holds after an Apply that wrote token.
func (d *Datapath) committedNow(token uint64, prog programID) (*Committed, error) {
	boot, err := bootID()
	if err != nil {
		return nil, err
	}
	ids, err := mapIDs(d.maps)
	if err != nil {
		return nil, err
	}
	return &Committed{
		Boot: boot, PinPath: d.opts.PinPath, Attach: d.opts.Attach, Sizes: d.opts.Sizes, Maps: ids, Token: token,
		ProgType: prog.typ, ProgTag: prog.tag, ProgMaps: prog.maps,
	}, nil
}

// programID identifies a loaded program the way runs compares one: type, tag and pinned maps.
type programID struct {
	typ  ebpf.ProgramType
	tag  string
	maps []ebpf.MapID
}

// Restore makes the next Apply start from p, which an Apply committed as c, when the maps pinned
// under the pin path are still the ones it wrote, untouched since (the same ids, and its token in
// apply_token), and the options are the same. It tells whether they are; when not, the next
// Apply reads the maps back as without Restore. That Apply then reads back only the records, and
// the rings of the services that differ from p: the services of p that the records show as p has
// them are not written again.
func (d *Datapath) Restore(c Committed, p *plan.Plan) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c.PinPath != d.opts.PinPath || c.Attach != d.opts.Attach || c.Sizes != d.opts.Sizes || c.Token == 0 {
		return false, nil
	}
	if boot, err := bootID(); err != nil || boot != c.Boot {
		return false, nil
	}
	m, err := openPinned(d.opts.PinPath)
	if err != nil || m == nil {
		return false, nil // the Apply without Restore says what is wrong
	}
	ids, err := mapIDs(m)
	var token uint64
	if err == nil && m.ApplyToken != nil {
		err = m.ApplyToken.Lookup(uint32(0), &token)
	}
	if err != nil || token != c.Token || !maps.Equal(ids, c.Maps) {
		return false, m.Close()
	}
	if err := d.closeObjects(); err != nil {
		return false, errors.Join(err, m.Close())
	}
	d.maps, d.state = m, nil
	d.restored = &restored{plan: p, prog: programID{c.ProgType, c.ProgTag, c.ProgMaps}}
	return true, nil
}

// restored is what Restore found the maps hold: the plan last applied and the program the links
// run.
type restored struct {
	plan *plan.Plan
	prog programID
}

// restoredState reads the records back and takes the plan's services whose records match it as
// programmed: the sync skips those. The rings of the others are read, for the sync to write only
// the slots that change.
func restoredState(m *kernelMaps, prev, next *plan.Plan) (*state, error) {
	st, err := readRecords(m)
	if err != nil {
		return nil, err
	}
	for i := range prev.Services {
		ps := &prev.Services[i]
		if cur := st.services[ps.Name]; cur != nil && holds(cur, ps) {
			planned := *ps
			cur.planned = &planned
		}
	}
	for i := range next.Services {
		ps := &next.Services[i]
		cur := st.services[ps.Name]
		if cur == nil || (cur.planned != nil && cur.planned.Equal(ps)) {
			continue
		}
		if cur.slots, err = readRing(m.Maglev, cur.rec.RingOffset, cur.rec.RingSize); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// holds tells whether the records of a service read back are those of ps as the sync programs
// it: the service's record and ring size, and its backends' records, entries and settings.
func holds(cur *serviceState, ps *plan.Service) bool {
	rec, err := serviceRecordOf(ps)
	if err != nil || cur.rec.retired() || int(cur.rec.RingSize) != len(ps.Slots) {
		return false
	}
	rec.RingOffset, rec.RingSize = cur.rec.RingOffset, cur.rec.RingSize
	if rec != cur.rec || cur.opts != serviceSettingsOf(ps) {
		return false
	}
	live := 0
	for _, b := range cur.backends {
		if !b.rec.retired() {
			live++
		}
	}
	if live != len(ps.Backends) {
		return false
	}
	for _, b := range ps.Backends {
		bs := cur.backends[b.ID()]
		if bs == nil || bs.rec != backendRecordOf(cur.id, b) || bs.entry != bs.rec.entry() || bs.opts != backendSettingsOf(ps, b) {
			return false
		}
	}
	return true
}

// readRing reads size slots of maglev from offset, one lookup each.
func readRing(m *ebpf.Map, offset, size uint32) ([]uint32, error) {
	if size == 0 {
		return nil, nil
	}
	slots := make([]uint32, size)
	for i := range slots {
		if err := m.Lookup(offset+uint32(i), &slots[i]); err != nil {
			return nil, fmt.Errorf("reading %s: %w", m, err)
		}
	}
	return slots, nil
}

// linksRun tells whether the links pinned under the pin path are exactly those of targets, on
// their interfaces, each running the program prog.
func (d *Datapath) linksRun(targets map[string]target, prog programID) bool {
	dir := filepath.Join(d.opts.PinPath, linksDir)
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != len(targets) {
		return false
	}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), "-"+string(d.opts.Attach))
		t, want := targets[name]
		if !ok || !want || !linkRuns(filepath.Join(dir, e.Name()), t.ifindex, prog) {
			return false
		}
	}
	return true
}

// linkRuns tells whether the link pinned at path is on ifindex and runs prog.
func linkRuns(path string, ifindex int, prog programID) bool {
	l, err := link.LoadPinnedLink(path, nil)
	if err != nil {
		return false
	}
	defer l.Close()
	info, err := l.Info()
	if err != nil || linkIfindex(info) != ifindex {
		return false
	}
	p, err := ebpf.NewProgramFromID(info.Program)
	if err != nil {
		return false
	}
	defer p.Close()
	pi, err := p.Info()
	if err != nil || pi.Type != prog.typ || pi.Tag != prog.tag {
		return false
	}
	used, _ := pi.MapIDs()
	for _, id := range prog.maps {
		if !slices.Contains(used, id) {
			return false
		}
	}
	return true
}

// mapIDs are the ids of the maps m holds, by name.
func mapIDs(m *kernelMaps) (map[string]ebpf.MapID, error) {
	out := map[string]ebpf.MapID{}
	for name, x := range m.byName() {
		info, err := x.Info()
		if err != nil {
			return nil, err
		}
		id, ok := info.ID()
		if !ok {
			return nil, fmt.Errorf("map %s: the kernel gives no id", name)
		}
		out[name] = id
	}
	return out, nil
}

// bootID is the kernel's id of this boot.
func bootID() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b)), err
}
