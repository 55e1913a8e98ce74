package bench

import (
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// Machine describes where a benchmark ran, so its numbers are read with their context.
type Machine struct {
	Kernel    string    `json:"kernel"`
	CPUs      int       `json:"cpus"`
	CPUModel  string    `json:"cpu_model"`
	MemoryGiB float64   `json:"memory_gib"`
	Go        string    `json:"go"`
	Date      time.Time `json:"date"`
}

// ThisMachine describes the machine the process runs on.
func ThisMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version(), Date: time.Now().UTC().Truncate(time.Second)}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		m.MemoryGiB = float64(si.Totalram) * float64(si.Unit) / (1 << 30)
	}
	if fs, err := procfs.NewDefaultFS(); err == nil {
		m.CPUModel = cpuModel(fs)
	}
	return m
}

// cpuModel is the model name of the first CPU of fs's cpuinfo; empty where it names none.
func cpuModel(fs procfs.FS) string {
	cpus, err := fs.CPUInfo()
	if err != nil || len(cpus) == 0 {
		return ""
	}
	return strings.TrimSpace(cpus[0].ModelName)
}

// Report is the envelope of every benchmark's JSON output.
type Report struct {
	Command string  `json:"command"`
	Machine Machine `json:"machine"`
	// Results is the benchmark's own result type.
	Results any `json:"results"`
}
