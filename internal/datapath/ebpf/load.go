package ebpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"

	"github.com/cilium/ebpf"
)

// kernelMaps are the pinned maps the loader reads and writes: the program's, in the struct bpf2go
// generates (sluiceMaps, each map described in bpf/maps.h), and Sluice's own (records.go). The
// program's per-CPU scratch maps are not pinned and stay nil here: the program holds them. A map added after the first version
// (firstMaps) is nil in a read-only open of pins made before it (openPinned); loading creates
// and pins it.
type kernelMaps struct {
	sluiceMaps
	ServiceMeta *ebpf.Map `ebpf:"service_meta"`
	BackendMeta *ebpf.Map `ebpf:"backend_meta"`
	ApplyToken  *ebpf.Map `ebpf:"apply_token"`
}

// firstMaps are the maps the first version pinned: pins of an older version may lack any other,
// which a read-only open accepts and a load mends.
var firstMaps = map[string]bool{
	sluiceMapVips: true, sluiceMapBackends: true, sluiceMapMaglev: true, sluiceMapFlows: true,
	sluiceMapReplies: true, sluiceMapServiceStats: true, sluiceMapBackendStats: true,
	sluiceMapConfig: true, serviceMetaName: true, backendMetaName: true,
}

// fields are the places of m's maps by the names their `ebpf` tags give, scratch maps included.
func (m *kernelMaps) fields() map[string]**ebpf.Map {
	out := map[string]**ebpf.Map{}
	v := reflect.ValueOf(m).Elem()
	for _, f := range reflect.VisibleFields(v.Type()) {
		if name := f.Tag.Get("ebpf"); name != "" {
			out[name] = v.FieldByIndex(f.Index).Addr().Interface().(**ebpf.Map)
		}
	}
	return out
}

// byName returns the maps m holds by pin name.
func (m *kernelMaps) byName() map[string]*ebpf.Map {
	out := map[string]*ebpf.Map{}
	for name, f := range m.fields() {
		if *f != nil {
			out[name] = *f
		}
	}
	return out
}

// pinnedMapsOf takes the maps spec pins out of a collection, so that closing it leaves them open.
func pinnedMapsOf(coll *ebpf.Collection, spec *ebpf.CollectionSpec) *kernelMaps {
	m := &kernelMaps{}
	for name, f := range m.fields() {
		if ms := spec.Maps[name]; ms != nil && ms.Pinning == ebpf.PinByName {
			*f = coll.DetachMap(name)
		}
	}
	return m
}

func (m *kernelMaps) Close() error {
	var errs []error
	for _, x := range m.byName() {
		errs = append(errs, x.Close())
	}
	return errors.Join(errs...)
}

// MapSizes are the sizes of the maps an operator may choose (config `ebpf:`); zero keeps the
// default of bpf/constants.h.
type MapSizes struct {
	// Flows is the size of the flow table and of the replies table, each.
	Flows uint32
	// MaglevSlots is the size of the array holding every service's Maglev table.
	MaglevSlots uint32
}

// resizable maps each map whose size MapSizes sets to that size. The persistent clients are a
// quarter of the flows: a client holds one entry for all its flows.
func (s MapSizes) resizable() map[string]uint32 {
	persist := uint32(0)
	if s.Flows > 0 {
		persist = max(s.Flows/4, 1024)
	}
	return map[string]uint32{sluiceMapFlows: s.Flows, sluiceMapReplies: s.Flows, sluiceMapMaglev: s.MaglevSlots, sluiceMapPersist: persist}
}

// collectionSpec is the embedded collection with Sluice's own maps added, the sizes set and only
// the named program kept ("": none). The other sizes are the defaults of bpf/constants.h. A
// pinned map is reused only when its size matches, so sizes are not adjusted to the plan; Apply
// reports a plan that does not fit.
func collectionSpec(program string, sizes MapSizes) (*ebpf.CollectionSpec, error) {
	spec, err := loadSluice()
	if err != nil {
		return nil, err
	}
	for name, n := range sizes.resizable() {
		if n > 0 {
			spec.Maps[name].MaxEntries = n
		}
	}
	for _, ms := range append(metaSpecs(spec.Maps[sluiceMapServiceStats].MaxEntries, spec.Maps[sluiceMapBackends].MaxEntries), applyTokenSpec()) {
		spec.Maps[ms.Name] = ms
	}
	for name := range spec.Programs {
		if name != program {
			delete(spec.Programs, name)
		}
	}
	return spec, nil
}

// loadObjects loads the program and its maps: the maps pinned under dir are reused (flows and
// counters survive), missing ones are created and pinned. So a version that adds a map (if_macs)
// adopts the pins of the one before, and attach has the links run the program using all of them.
func loadObjects(dir, program string, sizes MapSizes) (*kernelMaps, *ebpf.Program, error) {
	spec, err := collectionSpec(program, sizes)
	if err != nil {
		return nil, nil, err
	}
	if err := fitLRUs(spec, dir); err != nil {
		return nil, nil, err
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: dir}})
	if errors.Is(err, ebpf.ErrMapIncompatible) {
		return nil, nil, fmt.Errorf("the maps pinned under %s do not fit this version of the program or the configured sizes (ebpf.max_flows, ebpf.maglev_slots); `sluice flush` removes them and drops every flow: %w", dir, err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("loading the BPF program: %w", err)
	}
	defer coll.Close()
	return pinnedMapsOf(coll, spec), coll.DetachProgram(program), nil
}

// openPinned opens the maps pinned under dir without loading anything, whatever their sizes;
// nil when nothing is pinned there.
func openPinned(dir string) (*kernelMaps, error) {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	spec, err := collectionSpec("", MapSizes{})
	if err != nil {
		return nil, err
	}
	resizable := MapSizes{}.resizable()
	coll := &ebpf.Collection{Maps: map[string]*ebpf.Map{}}
	defer coll.Close()
	for name, ms := range spec.Maps {
		if ms.Pinning != ebpf.PinByName {
			continue
		}
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), nil)
		if !firstMaps[name] && errors.Is(err, os.ErrNotExist) {
			continue // pins made before the map; reading the maps needs none
		}
		if err != nil {
			return nil, fmt.Errorf("opening pinned map %s: %w", name, err)
		}
		coll.Maps[name] = m
		if _, ok := resizable[name]; ok {
			ms.MaxEntries = m.MaxEntries()
		}
		adoptLRUFlags(ms, m)
		if err := ms.Compatible(m); err != nil {
			return nil, fmt.Errorf("pinned map %s: %w", name, err)
		}
	}
	return pinnedMapsOf(coll, spec), nil
}

// load loads the program and opens or creates the pinned maps: once, and again when what is
// pinned is no longer what this process loaded (another process flushed) on a read-back apply.
func (d *Datapath) load() error {
	if d.prog != nil && (d.state != nil || d.stillPinned()) {
		return nil
	}
	d.closeLinks()
	if err := preparePinPath(d.opts.PinPath); err != nil {
		return err
	}
	if err := d.closeObjects(); err != nil { // maps opened for reading only
		return err
	}
	maps, prog, err := loadObjects(d.opts.PinPath, attachPrograms[d.opts.Attach], d.opts.Sizes)
	if err != nil {
		return err
	}
	info, err := prog.Info()
	if err != nil {
		return errors.Join(err, prog.Close(), maps.Close())
	}
	used, err := pinnedMapsUsed(info, maps)
	if err != nil {
		return errors.Join(err, prog.Close(), maps.Close())
	}
	d.maps, d.prog, d.progTag, d.progMaps = maps, prog, info.Tag, used
	return nil
}

// pinnedMapsUsed are the ids of the pinned maps a loaded program uses.
func pinnedMapsUsed(info *ebpf.ProgramInfo, m *kernelMaps) ([]ebpf.MapID, error) {
	used, _ := info.MapIDs()
	var out []ebpf.MapID
	for _, x := range m.byName() {
		mi, err := x.Info()
		if err != nil {
			return nil, err
		}
		if id, _ := mi.ID(); slices.Contains(used, id) {
			out = append(out, id)
		}
	}
	return out, nil
}

// stillPinned tells whether the vips map pinned under the pin path is the one loaded.
func (d *Datapath) stillPinned() bool {
	pinned, err := ebpf.LoadPinnedMap(filepath.Join(d.opts.PinPath, sluiceMapVips), nil)
	if err != nil {
		return false
	}
	defer pinned.Close()
	return sameMap(pinned, d.maps.Vips)
}

func sameMap(a, b *ebpf.Map) bool {
	ia, err1 := a.Info()
	ib, err2 := b.Info()
	if err1 != nil || err2 != nil {
		return false
	}
	ida, _ := ia.ID()
	idb, _ := ib.ID()
	return ida == idb
}

// pinnedMaps returns the maps, opening the pinned ones when nothing is open yet; nil when
// nothing is pinned.
func (d *Datapath) pinnedMaps() (*kernelMaps, error) {
	if d.maps != nil {
		return d.maps, nil
	}
	m, err := openPinned(d.opts.PinPath)
	d.maps = m
	return m, err
}

// closeObjects closes the program and the maps this process holds.
func (d *Datapath) closeObjects() error {
	var errs []error
	if d.prog != nil {
		errs = append(errs, d.prog.Close())
	}
	if d.maps != nil {
		errs = append(errs, d.maps.Close())
	}
	d.prog, d.maps = nil, nil
	return errors.Join(errs...)
}
