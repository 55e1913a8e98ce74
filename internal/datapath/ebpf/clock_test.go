package ebpf

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fullNATIdle is FULLNAT_IDLE_NS of bpf/flow.h: how long a fullnat port's flow must be idle before
// the program hands the port to another flow.
const fullNATIdle = 120 * time.Second

// bpfClockNow reads the clock the BPF program stamps flows with: CLOCK_MONOTONIC of the host.
// A time namespace shifts the test's CLOCK_MONOTONIC but not bpf_ktime_get_ns, so the namespace's
// offset (/proc/self/timens_offsets) is taken back out.
func bpfClockNow(t *testing.T) uint64 {
	t.Helper()
	offset, err := monotonicOffset()
	if err != nil {
		t.Fatal(err)
	}
	return uint64(int64(monotonicNow()) - offset)
}

// monotonicOffset is this process's time namespace's CLOCK_MONOTONIC offset in nanoseconds (0
// outside a time namespace or on a kernel without them).
func monotonicOffset() (int64, error) {
	f, err := os.Open("/proc/self/timens_offsets")
	if os.IsNotExist(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 || fields[0] != "monotonic" {
			continue
		}
		sec, err1 := strconv.ParseInt(fields[1], 10, 64)
		nsec, err2 := strconv.ParseInt(fields[2], 10, 64)
		if err1 != nil || err2 != nil {
			return 0, &strconv.NumError{Func: "timens_offsets", Num: sc.Text(), Err: strconv.ErrSyntax}
		}
		return sec*int64(time.Second) + nsec, nil
	}
	return 0, sc.Err()
}
