package datapath

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/prometheus/procfs"
)

// ConntrackFill reads how many entries the conntrack table of the calling thread's network
// namespace holds, and how many it can hold; both are 0 where conntrack is not loaded. A full
// table drops the first packet of every new flow that needs an entry.
func ConntrackFill() (count, max uint64, err error) {
	proc, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, 0, err
	}
	return conntrackFill(proc)
}

// conntrackFill is ConntrackFill from the sysctls of proc.
func conntrackFill(proc procfs.FS) (count, max uint64, err error) {
	if count, err = readSysctl(proc, "net.netfilter.nf_conntrack_count"); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, 0, nil
		}
		return 0, 0, err
	}
	if max, err = readSysctl(proc, "net.netfilter.nf_conntrack_max"); err != nil {
		return 0, 0, err
	}
	return count, max, nil
}

// ReadSysctl reads the number a sysctl (dotted, like net.ipv4.ip_forward) holds in the calling
// thread's network namespace.
func ReadSysctl(name string) (uint64, error) {
	proc, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, err
	}
	return readSysctl(proc, name)
}

// readSysctl reads the number a sysctl (dotted, like net.ipv4.ip_forward) of proc holds.
func readSysctl(proc procfs.FS, name string) (uint64, error) {
	v, err := proc.SysctlInts(name)
	if err != nil {
		return 0, err
	}
	if len(v) != 1 || v[0] < 0 {
		return 0, fmt.Errorf("sysctl %s holds %v, not one number", name, v)
	}
	return uint64(v[0]), nil
}
