package ebpf

import (
	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/plan"
)

// state mirrors what Sluice wrote to the maps, with the id and ring allocators derived from it.
// Apply keeps it as what it last programmed, so that the next Apply writes only what a changed
// service changes; read back from the maps (first use, restart, Resync) it lets Apply repair
// what others changed.
type state struct {
	services   map[string]*serviceState // by name, retired ones included
	byID       map[uint32]*serviceState
	vips       map[sluiceVipKey]sluiceService // the content of vips
	serviceIDs *idSet
	backendIDs *idSet
	ring       *ringSpace
	globals    sluiceGlobals
	// readBack is set when the state was read from the maps: the next sync also removes what no
	// record explains and frees the ids of retired backends whose flows are idle.
	readBack bool
	strays   strays
	limits   limits
	prev     prevSlots // the content of maglev_prev
	// prevChanged is when the slots of prev this process remembered changed (CLOCK_MONOTONIC),
	// until replication covers the change (ReplicatedUntil); a slot read back has no time.
	prevChanged map[uint32]uint64
}

// strays are what a read back found that no record explains, by id: removed by the next sync
// unless the id is in use by then.
type strays struct {
	services []uint32 // service_meta records of a name recorded twice
	records  []uint32 // backend_meta records of no service
	entries  []uint32 // backends entries valid without a record
}

// serviceState is one service: its record, backends and ring.
type serviceState struct {
	id       uint32
	rec      serviceRecord
	ports    config.PortList          // its keys in vips
	planned  *plan.Service            // the plan last programmed; nil when read back
	backends map[string]*backendState // by plan.Backend.ID(), retired ones included
	slots    []uint32                 // the ring as in maglev: backend id per slot
	opts     sluiceServiceSettings    // its entry in service_opts
	source   sluiceGlobals            // its entry in service_sources, written while it has its own
	tunnel   sluiceTunnel             // its entry in service_tunnels, written while it is a tunnel
	sources  sourceLists              // its prefixes in source_allow and source_deny
}

// backendState is one backend of a service: its record, its entry in backends and its
// settings in backend_opts.
type backendState struct {
	id    uint32
	rec   backendRecord
	entry sluiceBackend
	opts  sluiceBackendSettings
}

// limits are the capacities of the maps, read from the loaded maps.
type limits struct {
	vips, services, backends, slots uint32
}

func limitsOf(m *kernelMaps) limits {
	return limits{vips: m.Vips.MaxEntries(), services: m.ServiceStats.MaxEntries(), backends: m.Backends.MaxEntries(), slots: m.Maglev.MaxEntries()}
}

func newState(l limits) *state {
	return &state{
		limits: l, services: map[string]*serviceState{}, byID: map[uint32]*serviceState{}, vips: map[sluiceVipKey]sluiceService{},
		serviceIDs: newIDSet(l.services), backendIDs: newIDSet(l.backends), ring: newRingSpace(l.slots), prev: prevSlots{},
	}
}

func (st *state) addService(name string, s *serviceState) {
	st.services[name] = s
	st.byID[s.id] = s
}

func (st *state) dropService(s *serviceState) {
	delete(st.services, s.rec.name())
	delete(st.byID, s.id)
	st.serviceIDs.free(s.id)
}

// readState reads the maps back. Records that contradict each other (an id out of range, a ring
// overlapping another) are read as if the ring were empty or the backend absent: the next sync
// programs them anew.
func readState(m *kernelMaps) (*state, error) {
	st, err := readRecords(m)
	if err != nil {
		return nil, err
	}
	return st, readRings(m, st)
}

// readRecords is readState but for the rings: every service's slots are left nil.
func readRecords(m *kernelMaps) (*state, error) {
	st := newState(limitsOf(m))
	st.readBack = true
	if err := m.Config.Lookup(uint32(0), &st.globals); err != nil {
		return nil, err
	}
	err := readAll(m.ServiceMeta, func(id uint32, rec serviceRecord) bool {
		if _, dup := st.services[rec.name()]; dup || !st.serviceIDs.mark(id) {
			st.strays.services = append(st.strays.services, id)
			return true
		}
		if rec.RingSize > 0 && st.ring.reserve(rec.RingOffset, rec.RingSize) != nil {
			rec.RingSize = 0
		}
		st.addService(rec.name(), &serviceState{id: id, rec: rec, backends: map[string]*backendState{}})
		return true
	})
	if err != nil {
		return nil, err
	}
	if err := readBackends(m, st); err != nil {
		return nil, err
	}
	if err := readAll(m.Vips, func(k sluiceVipKey, v sluiceService) bool { st.vips[k] = v; return true }); err != nil {
		return nil, err
	}
	readPorts(st)
	if err := readSources(m, st); err != nil {
		return nil, err
	}
	if err := readPrev(m.MaglevPrev, st); err != nil {
		return nil, err
	}
	return st, nil
}

// readPorts finds the ports of the services read back: their keys in vips.
func readPorts(st *state) {
	for k, v := range st.vips {
		if s := st.byID[v.Id]; s != nil && s.rec.mayOwn(k) {
			p := int(wirePort(k.Port))
			s.ports = append(s.ports, config.Range{First: p, Last: p})
		}
	}
	for _, s := range st.services {
		s.ports = s.ports.Canonical()
	}
}

// readBackends reads backend_meta and backends: the records attach backends to their services,
// the entries are what the program sees.
func readBackends(m *kernelMaps, st *state) error {
	owned := map[uint32]*backendState{}
	var lastService, lastBackend uint32
	err := readAll(m.BackendMeta, func(id uint32, rec backendRecord) bool {
		s := st.byID[rec.Service]
		if s == nil || s.backends[rec.backend().ID()] != nil || !st.backendIDs.mark(id) {
			st.strays.records = append(st.strays.records, id)
			return true
		}
		b := &backendState{id: id, rec: rec}
		s.backends[rec.backend().ID()] = b
		owned[id] = b
		lastBackend = max(lastBackend, id)
		return true
	})
	if err != nil {
		return err
	}
	err = readAll(m.Backends, func(id uint32, e sluiceBackend) bool {
		if e.Flags&sluiceBackendFlagsBACKEND_VALID == 0 {
			return true
		}
		if b := owned[id]; b != nil {
			b.entry = e
		} else {
			st.strays.entries = append(st.strays.entries, id)
		}
		return true
	})
	if err != nil {
		return err
	}
	for _, s := range st.services {
		lastService = max(lastService, s.id)
		if m.ServiceSources != nil && s.rec.source() == sluiceServiceSourceSOURCE_OWN {
			_ = m.ServiceSources.Lookup(s.id, &s.source) // an id out of range reads as no source
		}
	}
	// The settings arrays are read in batches up to the last id in use, not a lookup per id.
	if m.ServiceOpts != nil && len(st.services) > 0 {
		err = readAll(m.ServiceOpts, func(id uint32, v sluiceServiceSettings) bool {
			if s := st.byID[id]; s != nil {
				s.opts = v
			}
			return id < lastService
		})
	}
	if err == nil && m.BackendOpts != nil && len(owned) > 0 {
		err = readAll(m.BackendOpts, func(id uint32, v sluiceBackendSettings) bool {
			if b := owned[id]; b != nil {
				b.opts = v
			}
			return id < lastBackend
		})
	}
	return err
}

// readRings reads the part of maglev the rings use.
func readRings(m *kernelMaps, st *state) error {
	end := st.ring.end()
	if end == 0 {
		return nil
	}
	slots := make([]uint32, end)
	err := readAll(m.Maglev, func(i, backend uint32) bool {
		if i >= end {
			return false
		}
		slots[i] = backend
		return true
	})
	for _, s := range st.services {
		if s.rec.RingSize > 0 {
			s.slots = slots[s.rec.RingOffset : s.rec.RingOffset+s.rec.RingSize : s.rec.RingOffset+s.rec.RingSize]
		}
	}
	return err
}
