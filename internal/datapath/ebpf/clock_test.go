package ebpf

import (
	"strings"
	"testing"
	"time"
)

// fullNATIdle is FULLNAT_IDLE_NS of bpf/flow.h: how long a fullnat port's flow must be idle before
// the program hands the port to another flow.
const fullNATIdle = 120 * time.Second

// TestParseMonotonicOffset reads timens_offsets as the kernel writes it, a negative offset (a
// namespace that makes the machine look younger) included, and refuses a malformed line.
func TestParseMonotonicOffset(t *testing.T) {
	for _, c := range []struct {
		text string
		want int64
		err  bool
	}{
		{"monotonic           0         0\nboottime            0         0\n", 0, false},
		{"monotonic       -3600         0\nboottime        -3600         0\n", -3600 * int64(time.Second), false},
		{"boottime 5 0\nmonotonic 2 500\n", 2*int64(time.Second) + 500, false},
		{"", 0, false},
		{"monotonic 2\n", 0, true},
		{"monotonic x 0\n", 0, true},
	} {
		got, err := parseMonotonicOffset(strings.NewReader(c.text))
		if (err != nil) != c.err || got != c.want {
			t.Errorf("parseMonotonicOffset(%q) = %d, %v; want %d (error %v)", c.text, got, err, c.want, c.err)
		}
	}
}
