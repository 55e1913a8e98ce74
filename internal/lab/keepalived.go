package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
)

// Each balancer's keepalived runs VRRP only, in the foreground, logging to its state dir, with
// every pid file there: it never touches the host's /run/keepalived*.pid nor syslog.

func (l *Lab) balancerDir(i int) string { return filepath.Join(l.StateDir, fmt.Sprintf("lb%d", i)) }
func (l *Lab) keepalivedConfPath(i int) string {
	return filepath.Join(l.balancerDir(i), "keepalived.conf")
}
func (l *Lab) keepalivedPidPath(i int) string {
	return filepath.Join(l.balancerDir(i), "keepalived.pid")
}
func (l *Lab) keepalivedLogPath(i int) string {
	return filepath.Join(l.balancerDir(i), "keepalived.log")
}

func (l *Lab) vrrpPidPath(i int) string { return filepath.Join(l.balancerDir(i), "vrrp.pid") }

func (l *Lab) keepalivedArgv(bin string, i int) []string {
	dir := l.balancerDir(i)
	return []string{bin, "--dont-fork", "--log-console", "--log-detail", "--no-syslog", "--vrrp",
		"--use-file", l.keepalivedConfPath(i), "--pid", l.keepalivedPidPath(i),
		"--vrrp_pid", l.vrrpPidPath(i), "--checkers_pid", filepath.Join(dir, "checkers.pid"),
		"--bfd_pid", filepath.Join(dir, "bfd.pid")}
}

// keepalivedPid is balancer i's keepalived (parent) pid, or 0 if it is not running.
func (l *Lab) keepalivedPid(i int) int {
	pid, _ := readPidFile(l.keepalivedPidPath(i))
	if !running(pid, l.keepalivedConfPath(i)) {
		return 0
	}
	return pid
}

func (l *Lab) checkBalancer(i int) error {
	if i < 1 || i > l.Balancers {
		return fmt.Errorf("lab: no balancer %d", i)
	}
	return nil
}

// StartKeepalived writes config as balancer i's keepalived.conf and runs keepalived (VRRP only)
// in its namespace until StopKeepalived, KillKeepalived or Down. A config keepalived's own check
// refuses is an error quoting it (file and line), and nothing starts; so is a keepalived that
// runs already. It returns once the VRRP process runs.
func (l *Lab) StartKeepalived(ctx context.Context, i int, config string) error {
	if err := l.checkBalancer(i); err != nil {
		return err
	}
	if pid := l.keepalivedPid(i); pid != 0 {
		return fmt.Errorf("lab: keepalived runs already on balancer %d (pid %d)", i, pid)
	}
	bin, err := sbinPath("keepalived")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(l.balancerDir(i), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(l.keepalivedConfPath(i), []byte(config), 0o644); err != nil {
		return err
	}
	ns := l.BalancerNSOf(i)
	// The check runs in the namespace: it looks up the interfaces the config names.
	if out, err := l.Exec(ctx, ns, bin, "--config-test", "--use-file", l.keepalivedConfPath(i)).CombinedOutput(); err != nil {
		return fmt.Errorf("lab: keepalived config for balancer %d: %w: %s", i, err, out)
	}
	pid, done, err := l.startDetached(ns, l.keepalivedArgv(bin, i), l.keepalivedLogPath(i))
	if err != nil {
		return err
	}
	err = waitReady(ctx, pid, done, l.keepalivedLogPath(i), func() bool {
		group, _ := processGroup(pid)
		return l.keepalivedPid(i) == pid && len(group) > 1
	})
	if err != nil {
		return fmt.Errorf("keepalived on balancer %d: %w", i, err)
	}
	return nil
}

// StopKeepalived stops balancer i's keepalived with SIGTERM, as an orderly shutdown: VRRP
// sends its priority-0 advertisement and removes its addresses. It waits until every keepalived
// process is gone; stopping a stopped one is fine.
func (l *Lab) StopKeepalived(i int) error {
	if err := l.checkBalancer(i); err != nil {
		return err
	}
	return l.stopKeepalived(context.Background(), i)
}

func (l *Lab) stopKeepalived(ctx context.Context, i int) error {
	pid := l.keepalivedPid(i)
	var group []int
	if pid != 0 {
		group, _ = processGroup(pid)
	}
	if err := stopPid(ctx, pid, l.keepalivedConfPath(i), l.keepalivedPidPath(i)); err != nil {
		return err
	}
	alive := func(p int) bool { return running(p, l.keepalivedConfPath(i)) }
	if left := waitWhile(ctx, stopTimeout, group, alive); len(left) > 0 {
		return fmt.Errorf("keepalived on balancer %d: pids %v outlived their parent", i, left)
	}
	return nil
}

// KillKeepalived kills balancer i's keepalived processes with SIGKILL, the VRRP one first, as a
// crash: no priority-0 advertisement, and the VRRP addresses stay on the interface. The backup
// takes over only when the master's advertisements time out. It returns once they are gone.
func (l *Lab) KillKeepalived(i int) error {
	if err := l.checkBalancer(i); err != nil {
		return err
	}
	pid := l.keepalivedPid(i)
	if pid == 0 {
		return fmt.Errorf("lab: keepalived is not running on balancer %d", i)
	}
	group, err := processGroup(pid)
	if err != nil {
		return err
	}
	// The parent last: a child that outlived it would get SIGTERM and say goodbye.
	children := slices.DeleteFunc(slices.Clone(group), func(p int) bool { return p == pid })
	signalAll(append(children, pid), syscall.SIGKILL)
	alive := func(p int) bool { return running(p, l.keepalivedConfPath(i)) }
	if left := waitWhile(context.Background(), stopTimeout, group, alive); len(left) > 0 {
		return fmt.Errorf("keepalived on balancer %d: pids %v survived SIGKILL", i, left)
	}
	return errors.Join(removeFile(l.keepalivedPidPath(i)), removeFile(l.vrrpPidPath(i)))
}
