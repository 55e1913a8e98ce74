package bench

import (
	"os"
	"testing"

	"github.com/prometheus/procfs"

	"github.com/sluicelb/sluice/internal/procs"
)

// fixtureProc is testdata/proc, a fake /proc: a stat whose cpu1 holds times past 2^32 ticks, a
// meminfo, a cpuinfo, a net/tcp, and processes: sluice (10) with its child nft (11), whose own
// child (12) leads another group, and a zombie nft (13); init (1) and another tree (20).
func fixtureProc(t *testing.T) procfs.FS {
	t.Helper()
	fs, err := procfs.NewFS("testdata/proc")
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// TestCPUTicks: the times procfs gives in seconds come back as the integers of /proc/stat.
func TestCPUTicks(t *testing.T) {
	c, err := cpuStat(fixtureProc(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	// cpu1 8589934303 10 7777469428 91234567294979 42 38 10952 ...
	if got := ticks(c.System, c.IRQ, c.SoftIRQ); got != 7777469428+38+10952 {
		t.Errorf("kernel ticks %d", got)
	}
	if got := ticks(c.Idle, c.Iowait); got != 91234567294979+42 {
		t.Errorf("idle ticks %d", got)
	}
	if got := ticks(c.User, c.Nice); got != 8589934303+10 {
		t.Errorf("user ticks %d", got)
	}
	if _, err := cpuStat(fixtureProc(t), 2); err == nil {
		t.Error("a CPU /proc/stat does not list read without an error")
	}
}

// TestTreeTicks: a tree's time is its processes' utime+stime, zombies and children in other
// process groups included; a gone pid counts nothing, not its orphans' parent's.
func TestTreeTicks(t *testing.T) {
	stats, err := procs.Stats(fixtureProc(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		pids []int
		want int64
	}{
		{[]int{10}, 120 + 10 + 3 + 7},
		{[]int{11, 99}, 10 + 3},
		{[]int{10, 20}, 140 + 100},
		{[]int{0}, 0},
		{nil, 0},
	} {
		if got := sumTreeTicks(stats, c.pids); got != c.want {
			t.Errorf("trees %v: %d ticks, want %d", c.pids, got, c.want)
		}
	}
	if treeTicks([]int{os.Getpid()}) < 0 {
		t.Error("this process's ticks are negative")
	}
}

func TestGroupMemory(t *testing.T) {
	// Group 10: sluice (3 pages), nft (2), the zombie (0); 12 leads a group of its own.
	if got, want := groupMemory(fixtureProc(t), 10), int64(5*os.Getpagesize()); got != want {
		t.Errorf("group 10: %d bytes, want %d", got, want)
	}
}

func TestCPUModel(t *testing.T) {
	if got := cpuModel(fixtureProc(t)); got != "Intel(R) Xeon(R) Test CPU @ 2.00GHz" {
		t.Errorf("model %q", got)
	}
	if got := cpuModel(procfs.FS{}); got != "" {
		t.Errorf("model %q without a cpuinfo", got)
	}
}

// TestStealShare: steal's share of every CPU time between two readings, in /proc/stat's own
// ticks; nothing when no time passed.
func TestStealShare(t *testing.T) {
	before := procfs.CPUStat{User: 100, System: 50, Idle: 840, Steal: 10}
	after := procfs.CPUStat{User: 150, System: 80, Idle: 850, Steal: 20}
	if s := stealShare(before, after); s == nil || *s != 0.1 {
		t.Errorf("share %v, want 0.1 (10 of 100 ticks)", s)
	}
	if s := stealShare(after, after); s != nil {
		t.Errorf("share %v of no time, want none", *s)
	}
}
