// Package procs reads what Sluice needs of /proc's processes through prometheus/procfs: the
// processes of a process group, and the sockets a process holds open.
package procs

import (
	"strconv"
	"strings"

	"github.com/prometheus/procfs"
)

// Stats is the stat of every process fs lists; one that exits while it is read is left out.
func Stats(fs procfs.FS) ([]procfs.ProcStat, error) {
	all, err := fs.AllProcs()
	if err != nil {
		return nil, err
	}
	stats := make([]procfs.ProcStat, 0, len(all))
	for _, p := range all {
		if st, err := p.Stat(); err == nil {
			stats = append(stats, st)
		}
	}
	return stats, nil
}

// Group is the stat of every process of process group pgid, zombies included.
func Group(fs procfs.FS, pgid int) ([]procfs.ProcStat, error) {
	stats, err := Stats(fs)
	if err != nil {
		return nil, err
	}
	var group []procfs.ProcStat
	for _, st := range stats {
		if st.PGRP == pgid {
			group = append(group, st)
		}
	}
	return group, nil
}

// SocketInodes is the set of the inodes of the sockets p holds open: its descriptors that link
// to "socket:[INODE]", as the inode column of the net/ tables names them.
func SocketInodes(p procfs.Proc) (map[uint64]bool, error) {
	targets, err := p.FileDescriptorTargets()
	if err != nil {
		return nil, err
	}
	inodes := map[uint64]bool{}
	for _, target := range targets {
		inode, ok := strings.CutPrefix(target, "socket:[")
		inode, closed := strings.CutSuffix(inode, "]")
		if n, err := strconv.ParseUint(inode, 10, 64); ok && closed && err == nil {
			inodes[n] = true
		}
	}
	return inodes, nil
}
