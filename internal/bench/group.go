package bench

import (
	"time"

	"github.com/prometheus/procfs"

	"github.com/sluicelb/sluice/internal/procs"
)

// peakGroupMemory samples, every 50 ms until done, the resident memory of every process of
// process group pgid summed, and returns the largest sum in bytes.
func peakGroupMemory(pgid int, done <-chan struct{}) int64 {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0
	}
	var peak int64
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		peak = max(peak, groupMemory(fs, pgid))
		select {
		case <-done:
			return peak
		case <-tick.C:
		}
	}
}

// groupMemory is the resident memory of process group pgid's processes, summed, in bytes.
func groupMemory(fs procfs.FS, pgid int) int64 {
	group, err := procs.Group(fs, pgid)
	if err != nil {
		return 0
	}
	var sum int64
	for _, st := range group {
		sum += int64(st.ResidentMemory())
	}
	return sum
}
