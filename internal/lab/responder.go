package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"

	"github.com/sluicelb/sluice/internal/procs"
)

// LabUDPResponder is a UDPResponderCmd that runs the hidden `udp-responder` command of the
// sluice-lab binary at path sluiceLab, on port 5353, answering with the backend's name.
func LabUDPResponder(sluiceLab string) func(reply string) []string {
	return func(reply string) []string {
		return []string{sluiceLab, "udp-responder", "--listen", ":5353", "--reply", reply}
	}
}

func (l *Lab) udpPidPath(i int) string { return filepath.Join(l.backendDir(i), "udp.pid") }
func (l *Lab) udpLogPath(i int) string { return filepath.Join(l.backendDir(i), "udp.log") }

// udpPid is backend i's UDP responder pid, or 0 if it is not running. The
// pid file holds the pid and the responder's command line, the identity
// check against a recycled pid.
func (l *Lab) udpPid(i int) int {
	pid, cmdline := readPidFile(l.udpPidPath(i))
	if cmdline == "" || !running(pid, cmdline) {
		return 0
	}
	return pid
}

// startUDPResponder starts backend i's UDP responder unless it runs already
// or UDPResponderCmd is nil, and waits until it holds a bound UDP socket.
func (l *Lab) startUDPResponder(ctx context.Context, i int) error {
	if l.UDPResponderCmd == nil || l.udpPid(i) != 0 {
		return nil
	}
	argv := l.UDPResponderCmd(BackendName(i))
	if len(argv) == 0 {
		return fmt.Errorf("lab: UDPResponderCmd returned no command")
	}
	pid, done, err := l.startDetached(l.BackendNS(i), argv, l.udpLogPath(i))
	if err != nil {
		return err
	}
	pidFile := fmt.Sprintf("%d\n%s\n", pid, strings.Join(argv, " "))
	if err := os.WriteFile(l.udpPidPath(i), []byte(pidFile), 0o644); err != nil {
		return err
	}
	if err := waitReady(ctx, pid, done, l.udpLogPath(i), func() bool { return hasUDPSocket(pid) }); err != nil {
		return fmt.Errorf("udp responder %s: %w", BackendName(i), err)
	}
	return nil
}

func (l *Lab) stopUDPResponder(ctx context.Context, i int) error {
	pid, cmdline := readPidFile(l.udpPidPath(i))
	if cmdline == "" {
		pid = 0
	}
	return stopPid(ctx, pid, cmdline, l.udpPidPath(i))
}

// hasUDPSocket reports whether pid holds a socket listed in its namespace's UDP tables.
func hasUDPSocket(pid int) bool {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return false
	}
	held, err := procs.SocketInodes(p)
	if err != nil {
		return false
	}
	// /proc/PID/net holds the tables of pid's network namespace.
	ns, err := procfs.NewFS(filepath.Join(procfs.DefaultMountPoint, strconv.Itoa(pid)))
	if err != nil {
		return false
	}
	for _, table := range []func() (procfs.NetUDP, error){ns.NetUDP, ns.NetUDP6} {
		sockets, _ := table()
		for _, s := range sockets {
			if held[s.Inode] {
				return true
			}
		}
	}
	return false
}
