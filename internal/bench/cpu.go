package bench

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
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

// treeTicks sums user and system time of the processes and all their descendants.
func treeTicks(pids []int) int64 {
	var total int64
	for _, pid := range pids {
		total += procTicks(pid) + treeTicks(children(pid))
	}
	return total
}

// procTicks is utime+stime of pid (all its threads), 0 if it is gone.
func procTicks(pid int) int64 {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// Fields after the parenthesised command name; utime and stime are fields 14 and 15.
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return utime + stime
}

// children lists pid's child processes (from every thread).
func children(pid int) []int {
	tasks, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "children"))
	var out []int
	for _, t := range tasks {
		b, _ := os.ReadFile(t)
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}
