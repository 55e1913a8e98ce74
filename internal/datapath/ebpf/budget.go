package ebpf

import (
	"fmt"
	"sync"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/plan"
)

var _ datapath.Budgeter = (*Datapath)(nil)

// Kernel memory the preallocated maps take per entry (measured with bpftool map show): a flow
// and its replies entry, a Maglev slot.
const (
	bytesPerFlow = 280
	bytesPerSlot = 8
)

// Budget refuses a plan that does not fit the maps, with nothing written: their sizes are the
// configured ones (ebpf.maglev_slots) and bpf/constants.h's.
func (d *Datapath) Budget(p *plan.Plan) error {
	l, err := specLimits(d.opts.Sizes)
	if err != nil {
		return err
	}
	return checkLimits(p, l)
}

// specLimits are the limits of maps made with these sizes.
func specLimits(sizes MapSizes) (limits, error) {
	defaults, err := defaultLimits()
	if err != nil {
		return limits{}, err
	}
	if sizes.MaglevSlots > 0 {
		defaults.slots = sizes.MaglevSlots
	}
	return defaults, nil
}

// defaultLimits reads the map sizes of bpf/constants.h from the embedded collection, once.
var defaultLimits = sync.OnceValues(func() (limits, error) {
	spec, err := loadSluice()
	if err != nil {
		return limits{}, err
	}
	return limits{
		vips: spec.Maps[sluiceMapVips].MaxEntries, services: spec.Maps[sluiceMapServiceStats].MaxEntries,
		backends: spec.Maps[sluiceMapBackends].MaxEntries, slots: spec.Maps[sluiceMapMaglev].MaxEntries,
	}, nil
})

// checkLimits fails a plan that does not fit the maps, before anything is written.
func checkLimits(p *plan.Plan, l limits) error {
	var vips, backends, slots int
	for _, s := range p.Services {
		vips += s.Ports.Count()
		backends += len(s.Backends)
		slots += len(s.Slots)
	}
	const fixed = "split the services over several balancers, or use datapath: nft"
	for _, c := range []datapath.BudgetError{
		{Field: "services", What: "services (bpf/constants.h MAX_SERVICES)", Need: len(p.Services), Limit: int(l.services), Instead: fixed},
		{Field: "services", What: "vips entries, one per service port (bpf/constants.h MAX_VIPS)", Need: vips, Limit: int(l.vips), Instead: "use fewer or narrower port ranges, or " + fixed},
		{Field: "services", What: "backends, counted per service (bpf/constants.h MAX_BACKENDS)", Need: backends, Limit: int(l.backends), Instead: fixed},
		{
			Field: "ebpf.maglev_slots", What: "Maglev slots", Need: slots, Limit: int(l.slots),
			Cost: fmt.Sprintf("%d KB of kernel memory", slots*bytesPerSlot>>10),
			Instead: fmt.Sprintf("raise ebpf.maglev_slots (up to %d; %d bytes of kernel memory a slot, preallocated; "+
				"a resize takes a restart after `sluice flush`) or use smaller table_size values", config.MaxMaglevSlots, bytesPerSlot),
		},
	} {
		if c.Need > c.Limit {
			return &c
		}
	}
	return nil
}

// PreallocatedBytes is about the kernel memory the maps of these sizes take whatever the
// config (they are preallocated): the flow and replies tables and the Maglev array, which
// dominate.
func PreallocatedBytes(s config.EBPFSizes) uint64 {
	return uint64(s.MaxFlows)*bytesPerFlow + uint64(s.MaglevSlots)*bytesPerSlot
}

// CheckMemory refuses map sizes that would take more than half of the machine's memory
// (total, in bytes): preallocated maps are never given back while pinned.
func CheckMemory(s config.EBPFSizes, total uint64) error {
	need := PreallocatedBytes(s)
	if total == 0 || need <= total/2 {
		return nil
	}
	return &datapath.BudgetError{
		Field: "ebpf.max_flows and ebpf.maglev_slots", What: "bytes of preallocated kernel memory for the maps",
		Need: int(need), Limit: int(total / 2),
		Cost: fmt.Sprintf("%d flows x %d bytes + %d slots x %d bytes", s.MaxFlows, bytesPerFlow, s.MaglevSlots, bytesPerSlot),
		Instead: "the limit is half of this machine's memory: lower ebpf.max_flows (the flow table is an LRU: " +
			"the oldest flows give way) or ebpf.maglev_slots",
	}
}
