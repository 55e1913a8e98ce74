package ebpf

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The programs stamp flows with bpf_ktime_get_ns (and its coarse twin): the host's
// CLOCK_MONOTONIC, which no time namespace shifts. A daemon in a time namespace (a container
// restored by CRIU, for one) reads its own CLOCK_MONOTONIC shifted by the namespace's offset, so
// monotonicNow takes the offset back out: flows' ages, second chance's deadlines, the sweeps and
// the replicated flows' times are then read on the programs' clock.

// monotonicNow is the clock of bpf_ktime_get_ns, in nanoseconds.
func monotonicNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) // cannot fail for this clock
	offset, _ := clockOffset()                       // New refuses to run when it cannot be read
	return uint64(ts.Nano() - offset)
}

// clockOffset is this process's time namespace's CLOCK_MONOTONIC offset, read once.
var clockOffset = sync.OnceValues(func() (int64, error) {
	f, err := os.Open("/proc/self/timens_offsets")
	if os.IsNotExist(err) { // a kernel without time namespaces
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading the time namespace's clock offsets: %w", err)
	}
	defer f.Close()
	return parseMonotonicOffset(io.LimitReader(f, 4096))
})

// parseMonotonicOffset reads the monotonic line of /proc/PID/timens_offsets ("monotonic <seconds>
// <nanoseconds>"), in nanoseconds; 0 when there is none.
func parseMonotonicOffset(r io.Reader) (int64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || fields[0] != "monotonic" {
			continue
		}
		if len(fields) != 3 {
			return 0, fmt.Errorf("timens_offsets: %q: want monotonic <seconds> <nanoseconds>", sc.Text())
		}
		sec, err1 := strconv.ParseInt(fields[1], 10, 64)
		nsec, err2 := strconv.ParseInt(fields[2], 10, 64)
		if err1 != nil || err2 != nil {
			return 0, fmt.Errorf("timens_offsets: %q: want monotonic <seconds> <nanoseconds>", sc.Text())
		}
		return sec*int64(time.Second) + nsec, nil
	}
	return 0, sc.Err()
}
