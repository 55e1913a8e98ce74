package ebpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/cilium/ebpf"
)

// kernelMaps are the pinned maps the loader reads and writes: the program's and Sluice's own.
// The program's other maps (per-CPU scratch space) are not pinned and not the loader's business.
type kernelMaps struct {
	Vips         *ebpf.Map
	Backends     *ebpf.Map
	Maglev       *ebpf.Map
	Flows        *ebpf.Map
	Replies      *ebpf.Map
	ServiceStats *ebpf.Map
	BackendStats *ebpf.Map
	Config       *ebpf.Map
	ServiceMeta  *ebpf.Map
	BackendMeta  *ebpf.Map
	// IfMACs and the session maps below are nil in a read-only open of pins that a version
	// before them made (openPinned); loading creates and pins them.
	IfMACs *ebpf.Map
	// ServiceOpts, BackendOpts, BackendConns, BackendLost and Persist hold what persistence,
	// the counting schedulers and connection thresholds need.
	ServiceOpts  *ebpf.Map
	BackendOpts  *ebpf.Map
	BackendConns *ebpf.Map
	BackendLost  *ebpf.Map
	Persist      *ebpf.Map
	// SourceAllow and SourceDeny are the services' access lists.
	SourceAllow *ebpf.Map
	SourceDeny  *ebpf.Map
	// ServiceRate, ServiceConns, ServiceLost and Clients hold the state of the services' limits.
	ServiceRate  *ebpf.Map
	ServiceConns *ebpf.Map
	ServiceLost  *ebpf.Map
	Clients      *ebpf.Map
	// ServiceRefusals counts the new flows each service refused, by reason.
	ServiceRefusals *ebpf.Map
	// ServiceUnforwarded counts the packets of each service the program could not forward, by reason.
	ServiceUnforwarded *ebpf.Map
	// ServiceSources holds the fullnat source of the services that have their own.
	ServiceSources *ebpf.Map
	// FlowEvents is the ring of new and closing flows a replicator reads (see WatchFlows), and
	// FlowEventDrops counts the events a full ring lost.
	FlowEvents     *ebpf.Map
	FlowEventDrops *ebpf.Map
	// MaglevPrev holds the slots whose backend changed in the last flow_timeout, and
	// SecondChances counts the flows each service gave to them (see secondchance.go).
	MaglevPrev    *ebpf.Map
	SecondChances *ebpf.Map
	// ServiceTunnels holds mode tunnel services' encapsulations, and TunnelStats counts their
	// packets by fate (see tunnel.go).
	ServiceTunnels *ebpf.Map
	TunnelStats    *ebpf.Map
	// FlowSources holds the source address of the fullnat flows replicated from other nodes
	// that translate to a source of their own (see import.go).
	FlowSources *ebpf.Map
}

// addedMaps are the pinned maps later versions added: pins of an older version lack them, which
// a read-only open accepts and a load mends.
var addedMaps = map[string]bool{
	sluiceMapIfMacs: true, sluiceMapServiceOpts: true, sluiceMapBackendOpts: true,
	sluiceMapBackendConns: true, sluiceMapBackendLost: true, sluiceMapPersist: true,
	sluiceMapSourceAllow: true, sluiceMapSourceDeny: true,
	sluiceMapServiceRate: true, sluiceMapServiceConns: true, sluiceMapServiceLost: true, sluiceMapClients: true,
	sluiceMapServiceRefusals: true, sluiceMapServiceUnforwarded: true,
	sluiceMapFlowEvents: true, sluiceMapFlowEventDrops: true, sluiceMapServiceSources: true,
	sluiceMapMaglevPrev: true, sluiceMapSecondChances: true,
	sluiceMapServiceTunnels: true, sluiceMapTunnelStats: true, sluiceMapFlowSources: true,
}

// fields are the maps' places in m by pin name.
func (m *kernelMaps) fields() map[string]**ebpf.Map {
	return map[string]**ebpf.Map{
		sluiceMapVips: &m.Vips, sluiceMapBackends: &m.Backends, sluiceMapMaglev: &m.Maglev,
		sluiceMapFlows: &m.Flows, sluiceMapReplies: &m.Replies, sluiceMapServiceStats: &m.ServiceStats,
		sluiceMapBackendStats: &m.BackendStats, sluiceMapConfig: &m.Config,
		serviceMetaName: &m.ServiceMeta, backendMetaName: &m.BackendMeta, sluiceMapIfMacs: &m.IfMACs,
		sluiceMapServiceOpts: &m.ServiceOpts, sluiceMapBackendOpts: &m.BackendOpts,
		sluiceMapBackendConns: &m.BackendConns, sluiceMapBackendLost: &m.BackendLost, sluiceMapPersist: &m.Persist,
		sluiceMapSourceAllow: &m.SourceAllow, sluiceMapSourceDeny: &m.SourceDeny,
		sluiceMapServiceRate: &m.ServiceRate, sluiceMapServiceConns: &m.ServiceConns,
		sluiceMapServiceLost: &m.ServiceLost, sluiceMapClients: &m.Clients,
		sluiceMapServiceRefusals: &m.ServiceRefusals, sluiceMapServiceUnforwarded: &m.ServiceUnforwarded,
		sluiceMapFlowEvents: &m.FlowEvents, sluiceMapFlowEventDrops: &m.FlowEventDrops,
		sluiceMapServiceSources: &m.ServiceSources, sluiceMapMaglevPrev: &m.MaglevPrev,
		sluiceMapSecondChances: &m.SecondChances, sluiceMapServiceTunnels: &m.ServiceTunnels,
		sluiceMapTunnelStats: &m.TunnelStats,
		sluiceMapFlowSources: &m.FlowSources,
	}
}

// byName returns the maps by pin name.
func (m *kernelMaps) byName() map[string]*ebpf.Map {
	out := map[string]*ebpf.Map{}
	for name, f := range m.fields() {
		out[name] = *f
	}
	return out
}

// kernelMapsOf takes the pinned maps out of a collection, so that closing it leaves them open.
func kernelMapsOf(coll *ebpf.Collection) *kernelMaps {
	m := &kernelMaps{}
	for name, f := range m.fields() {
		*f = coll.DetachMap(name)
	}
	return m
}

func (m *kernelMaps) Close() error {
	var errs []error
	for _, x := range m.byName() {
		if x != nil {
			errs = append(errs, x.Close())
		}
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
	for _, ms := range metaSpecs(spec.Maps[sluiceMapServiceStats].MaxEntries, spec.Maps[sluiceMapBackends].MaxEntries) {
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
	return kernelMapsOf(coll), coll.DetachProgram(program), nil
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
		if addedMaps[name] && errors.Is(err, os.ErrNotExist) {
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
	return kernelMapsOf(coll), nil
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
