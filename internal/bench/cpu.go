package bench

import (
	"fmt"
	"math"
	"time"

	"github.com/prometheus/procfs"

	"github.com/sluicelb/sluice/internal/procs"
)

// clockTicks is USER_HZ, the unit of /proc/PID/stat times (100 on every Linux architecture Sluice runs on).
const clockTicks = 100

// cpuClock measures the CPU time a set of process trees spends over a wall-clock interval.
type cpuClock struct {
	pids  []int
	ticks int64
	start time.Time
}

// startCPUClock starts measuring the trees rooted at pids; none measures nothing.
func startCPUClock(pids []int) *cpuClock {
	if len(pids) == 0 {
		return nil
	}
	return &cpuClock{pids: pids, ticks: treeTicks(pids), start: time.Now()}
}

// cores is the CPU used since the start, in cores (1.0 = one core busy); nil when not measured.
func (c *cpuClock) cores() *float64 {
	if c == nil {
		return nil
	}
	wall := time.Since(c.start).Seconds()
	used := float64(treeTicks(c.pids)-c.ticks) / clockTicks / wall
	return &used
}

// treeTicks sums user and system time of the processes and all their descendants; 0 without /proc.
func treeTicks(pids []int) int64 {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0
	}
	stats, err := procs.Stats(fs)
	if err != nil {
		return 0
	}
	return sumTreeTicks(stats, pids)
}

// sumTreeTicks sums utime+stime (all threads) of the processes pids and their descendants in
// stats; a pid that is gone counts 0, and so do its children, as its children list is gone too.
func sumTreeTicks(stats []procfs.ProcStat, pids []int) int64 {
	byPID := map[int]procfs.ProcStat{}
	children := map[int][]int{}
	for _, st := range stats {
		byPID[st.PID] = st
		children[st.PPID] = append(children[st.PPID], st.PID)
	}
	var sum func(pids []int) int64
	sum = func(pids []int) int64 {
		var total int64
		for _, pid := range pids {
			if st, ok := byPID[pid]; ok {
				total += int64(st.UTime+st.STime) + sum(children[pid])
			}
		}
		return total
	}
	return sum(pids)
}

// stealClock measures the share of the machine's CPU time that its hypervisor took for other
// guests (steal) over an interval: a run that lost some ran on less machine than the others.
type stealClock struct{ start procfs.CPUStat }

// startStealClock starts measuring; nil where /proc/stat cannot be read.
func startStealClock() *stealClock {
	c, err := machineCPU()
	if err != nil {
		return nil
	}
	return &stealClock{start: c}
}

// share is the steal since the start over all the machine's CPU time; nil when not measured.
func (c *stealClock) share() *float64 {
	if c == nil {
		return nil
	}
	now, err := machineCPU()
	if err != nil {
		return nil
	}
	return stealShare(c.start, now)
}

// stealShare is steal's share of the CPU time between two readings of /proc/stat; nil when no
// time passed between them.
func stealShare(before, after procfs.CPUStat) *float64 {
	all := func(c procfs.CPUStat) int64 {
		return ticks(c.User, c.Nice, c.System, c.Idle, c.Iowait, c.IRQ, c.SoftIRQ, c.Steal)
	}
	total := all(after) - all(before)
	if total <= 0 {
		return nil
	}
	share := float64(ticks(after.Steal)-ticks(before.Steal)) / float64(total)
	return &share
}

// machineCPU is the machine's line of /proc/stat, every CPU summed.
func machineCPU() (procfs.CPUStat, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return procfs.CPUStat{}, err
	}
	st, err := fs.Stat()
	if err != nil {
		return procfs.CPUStat{}, err
	}
	return st.CPUTotal, nil
}

// hostCPU is CPU cpu's line of the machine's /proc/stat.
func hostCPU(cpu int) (procfs.CPUStat, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return procfs.CPUStat{}, err
	}
	return cpuStat(fs, cpu)
}

// cpuStat is CPU cpu's line of fs's stat; a CPU it does not list is an error.
func cpuStat(fs procfs.FS, cpu int) (procfs.CPUStat, error) {
	st, err := fs.Stat()
	if err != nil {
		return procfs.CPUStat{}, err
	}
	c, ok := st.CPU[int64(cpu)]
	if !ok {
		return procfs.CPUStat{}, fmt.Errorf("/proc/stat has no cpu%d", cpu)
	}
	return c, nil
}

// ticks sums times procfs gives in seconds back in clockTicks, the integers /proc/stat holds.
func ticks(seconds ...float64) int64 {
	var sum float64
	for _, s := range seconds {
		sum += s
	}
	return int64(math.Round(sum * clockTicks))
}
