package datapath

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// procSys holds the sysctls of the calling thread's network namespace; conntrackSysctls is where
// the kernel tells how full its conntrack table is.
const (
	procSys          = "/proc/sys/"
	conntrackSysctls = procSys + "net/netfilter/"
)

// ConntrackFill reads how many entries the conntrack table of the calling thread's network
// namespace holds, and how many it can hold; both are 0 where conntrack is not loaded. A full
// table drops the first packet of every new flow that needs an entry.
func ConntrackFill() (count, max uint64, err error) {
	if count, err = readSysctl(conntrackSysctls + "nf_conntrack_count"); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, 0, nil
		}
		return 0, 0, err
	}
	if max, err = readSysctl(conntrackSysctls + "nf_conntrack_max"); err != nil {
		return 0, 0, err
	}
	return count, max, nil
}

// readSysctl reads the number a sysctl file under /proc/sys holds.
func readSysctl(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}
