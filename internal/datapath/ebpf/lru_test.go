package ebpf

import "testing"

// TestPerCPUEntries sizes a per-CPU LRU map as the kernel does: the asked size rounded up to a
// multiple of the CPUs, or down when that overflows.
func TestPerCPUEntries(t *testing.T) {
	for _, c := range []struct{ n, cpus, want uint32 }{
		{1 << 20, 2, 1 << 20},
		{1 << 20, 3, 1<<20 + 2},
		{1024, 96, 1056},
		{5, 8, 8},
		{1<<32 - 1, 2, 1<<32 - 2},
	} {
		if got := perCPUEntries(c.n, c.cpus); got != c.want {
			t.Errorf("perCPUEntries(%d, %d) = %d, want %d", c.n, c.cpus, got, c.want)
		}
	}
}
