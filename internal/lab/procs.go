package lab

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"

	"github.com/sluicelb/sluice/internal/procs"
)

// Timeouts for process start-up and for a graceful stop before SIGKILL.
const (
	startTimeout = 10 * time.Second
	stopTimeout  = 5 * time.Second
	pollInterval = 20 * time.Millisecond
)

// sbinPath finds a daemon on $PATH or in /usr/sbin, which root's $PATH may lack.
func sbinPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	p := filepath.Join("/usr/sbin", name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s not found on $PATH or at %s", name, p)
	}
	return p, nil
}

func parsePid(s string) (int, bool) {
	pid, err := strconv.Atoi(s)
	return pid, err == nil && pid > 0
}

// running reports whether pid is a live (non-zombie) process whose command
// line, its arguments joined by spaces, contains marker; the marker guards
// against signalling a recycled pid.
func running(pid int, marker string) bool {
	p, st, err := processStat(pid)
	if err != nil || st.State == "Z" || st.State == "X" {
		return false
	}
	cmdline, err := p.CmdLine()
	return err == nil && strings.Contains(strings.Join(cmdline, " "), marker)
}

// readPidFile returns the pid on a pid file's first line and the rest of the file (trimmed).
func readPidFile(path string) (int, string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, ""
	}
	first, rest, _ := strings.Cut(string(b), "\n")
	pid, _ := parsePid(strings.TrimSpace(first))
	return pid, strings.TrimSpace(rest)
}

// startDetached starts argv inside ns in a new session with output appended
// to logPath, so it outlives the caller; done closes when it exits while the
// caller still runs (a goroutine reaps it).
func (l *Lab) startDetached(ns string, argv []string, logPath string) (pid int, done <-chan struct{}, err error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, nil, err
	}
	defer logf.Close()
	cmd := l.Exec(context.Background(), ns, argv...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, nil, fmt.Errorf("start %s in %s: %w", argv[0], ns, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	return cmd.Process.Pid, exited, nil
}

// waitReady polls ready until it holds; it fails if the process exits, ctx
// ends or startTimeout passes, killing the process and quoting its log.
func waitReady(ctx context.Context, pid int, done <-chan struct{}, logPath string, ready func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for !ready() {
		select {
		case <-done:
			return fmt.Errorf("pid %d exited during start-up: %s", pid, logTail(logPath))
		case <-ctx.Done():
			_ = syscall.Kill(pid, syscall.SIGKILL)
			return fmt.Errorf("pid %d not ready: %w: %s", pid, ctx.Err(), logTail(logPath))
		case <-tick.C:
		}
	}
	return nil
}

func logTail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// stopPid sends SIGTERM to pid if it runs with marker, waits for it to go
// (SIGKILL after stopTimeout or when ctx ends) and removes pidFile.
func stopPid(ctx context.Context, pid int, marker, pidFile string) error {
	if running(pid, marker) {
		if err := terminate(ctx, []int{pid}, func(p int) bool { return running(p, marker) }); err != nil {
			return err
		}
	}
	return removeFile(pidFile)
}

// removeFile removes a file; a missing one is fine.
func removeFile(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// terminate sends SIGTERM to pids, then SIGKILL to those still alive after stopTimeout or when ctx ends.
func terminate(ctx context.Context, pids []int, alive func(pid int) bool) error {
	signalAll(pids, syscall.SIGTERM)
	left := waitWhile(ctx, stopTimeout, pids, alive)
	if len(left) == 0 {
		return nil
	}
	signalAll(left, syscall.SIGKILL)
	if left = waitWhile(context.Background(), stopTimeout, left, alive); len(left) > 0 {
		return fmt.Errorf("pids %v survived SIGKILL", left)
	}
	return nil
}

func signalAll(pids []int, sig syscall.Signal) {
	for _, pid := range pids {
		_ = syscall.Kill(pid, sig)
	}
}

// processStat reads pid's /proc/pid/stat; an error when pid is gone.
func processStat(pid int) (procfs.Proc, procfs.ProcStat, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return procfs.Proc{}, procfs.ProcStat{}, err
	}
	st, err := p.Stat()
	return p, st, err
}

// stopped reports whether pid is stopped by a signal (or gone).
func stopped(pid int) bool {
	_, st, err := processStat(pid)
	return err != nil || st.State == "T"
}

// processGroup lists the live (non-zombie) processes of process group pgid.
func processGroup(pgid int) ([]int, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return nil, err
	}
	group, err := procs.Group(fs, pgid)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, st := range group {
		if st.State != "Z" {
			pids = append(pids, st.PID)
		}
	}
	return pids, nil
}

// waitWhile polls until pending holds for no pid (alive, say) or timeout/ctx ends, returning the
// pids it still holds for.
func waitWhile(ctx context.Context, timeout time.Duration, pids []int, pending func(pid int) bool) []int {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		var left []int
		for _, pid := range pids {
			if pending(pid) {
				left = append(left, pid)
			}
		}
		if len(left) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return left
		case <-time.After(pollInterval):
		}
	}
}
