package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// SluiceUDPResponder is a UDPResponderCmd that runs the hidden `lab udp-responder` command of the
// sluice binary at path sluice, on port 5353, answering with the backend's name.
func SluiceUDPResponder(sluice string) func(reply string) []string {
	return func(reply string) []string {
		return []string{sluice, "lab", "udp-responder", "--listen", ":5353", "--reply", reply}
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
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return false
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if ino, ok := strings.CutPrefix(target, "socket:["); err == nil && ok {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	for _, table := range []string{"udp", "udp6"} {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		for _, line := range strings.Split(string(b), "\n")[1:] {
			// Columns: sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...
			if f := strings.Fields(line); len(f) > 9 && inodes[f[9]] {
				return true
			}
		}
	}
	return false
}
