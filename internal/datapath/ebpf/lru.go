package ebpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// noCommonLRU gives an LRU map a free list per CPU (BPF_F_NO_COMMON_LRU), as flows and replies
// have: a new flow's insert takes a node from its own CPU's list and evicts from its CPU's share
// (max_entries / possible CPUs), instead of refilling from the list all CPUs share.
const noCommonLRU = unix.BPF_F_NO_COMMON_LRU

// adoptLRUFlags has ms, the spec of a map with per-CPU LRU lists, take the flags of m, the map
// pinned in its place, when a version before them made m with the common list: the program works
// with either, and `sluice flush` makes the map anew with per-CPU lists.
func adoptLRUFlags(ms *ebpf.MapSpec, m *ebpf.Map) {
	if ms.Flags&noCommonLRU != 0 && m.Flags() == ms.Flags&^noCommonLRU {
		ms.Flags = m.Flags()
	}
}

// fitLRUs readies the per-CPU LRU maps of spec for the maps pinned under dir: one pinned with the
// common list is adopted with it (adoptLRUFlags), and the others get the size the kernel gives
// them, so that the next load finds the pinned map compatible.
func fitLRUs(spec *ebpf.CollectionSpec, dir string) error {
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return err
	}
	for name, ms := range spec.Maps {
		if ms.Flags&noCommonLRU == 0 {
			continue
		}
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), nil)
		switch {
		case err == nil:
			adoptLRUFlags(ms, m)
			m.Close()
		case !errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("opening pinned map %s: %w", name, err)
		}
		if ms.Flags&noCommonLRU != 0 {
			ms.MaxEntries = perCPUEntries(ms.MaxEntries, uint32(cpus))
		}
	}
	return nil
}

// perCPUEntries is the size the kernel gives a per-CPU LRU map asked for n entries: a multiple of
// the possible CPUs, so that each CPU's list holds the same share (n rounded up, or down when
// rounding up overflows).
func perCPUEntries(n, cpus uint32) uint32 {
	up := (n + cpus - 1) / cpus * cpus
	if up < n {
		return n / cpus * cpus
	}
	return up
}
