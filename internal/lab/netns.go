package lab

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"

	"github.com/prometheus/procfs"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// netnsDir is where iproute2 and the netns package keep named namespaces.
const netnsDir = "/var/run/netns"

// Exec returns a command running argv inside namespace ns via `ip netns exec`.
func (l *Lab) Exec(ctx context.Context, ns string, argv ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns}, argv...)...)
}

// Do runs fn on the calling OS thread switched into namespace ns; sockets fn
// opens stay in ns, but goroutines fn starts do not run in ns.
func (l *Lab) Do(ns string, fn func() error) error { return inNS(ns, fn) }

func inNS(name string, fn func() error) error {
	target, err := netns.GetFromName(name)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", name, err)
	}
	defer target.Close()
	return onLockedThread(func() error {
		if err := netns.Set(target); err != nil {
			return fmt.Errorf("enter netns %s: %w", name, err)
		}
		return fn()
	})
}

// onLockedThread runs fn on a locked OS thread and restores the thread's
// namespace afterwards; if that fails the thread stays locked and dies with
// its goroutine.
func onLockedThread(fn func() error) (err error) {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("get current netns: %w", err)
	}
	defer func() {
		if rerr := netns.Set(orig); rerr != nil {
			err = errors.Join(err, fmt.Errorf("restore netns: %w", rerr))
		} else {
			runtime.UnlockOSThread()
		}
		orig.Close()
	}()
	return fn()
}

// createNS creates the named namespace without moving the calling thread.
func createNS(name string) error {
	return onLockedThread(func() error {
		h, err := netns.NewNamed(name)
		if err != nil {
			return fmt.Errorf("create netns %s: %w", name, err)
		}
		return h.Close()
	})
}

// deleteNS unmounts and removes a named namespace; a missing one is fine.
func deleteNS(name string) error {
	p := filepath.Join(netnsDir, name)
	if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
		return fmt.Errorf("unmount %s: %w", p, err)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// labNamespaces lists the existing namespaces named like this lab's.
func (l *Lab) labNamespaces() ([]string, error) {
	re := regexp.MustCompile(`^` + regexp.QuoteMeta(l.Prefix) + `-(client|lb|lb[0-9]+|router|sw|attacker|b[0-9]+)$`)
	entries, err := os.ReadDir(netnsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if re.MatchString(e.Name()) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// nsPids returns the processes (other than this one) whose network namespace is the named one.
func nsPids(name string) ([]int, error) {
	var want unix.Stat_t
	if err := unix.Stat(filepath.Join(netnsDir, name), &want); err != nil {
		return nil, err
	}
	all, err := procfs.AllProcs()
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, p := range all {
		pid := p.PID
		if pid == os.Getpid() {
			continue
		}
		var st unix.Stat_t
		if unix.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &st) == nil && st.Dev == want.Dev && st.Ino == want.Ino {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// WithHandle runs fn with a netlink handle bound to namespace ns.
func WithHandle(ns string, fn func(h *netlink.Handle) error) error {
	nsh, err := netns.GetFromName(ns)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", ns, err)
	}
	defer nsh.Close()
	h, err := netlink.NewHandleAt(nsh)
	if err != nil {
		return fmt.Errorf("netlink handle in %s: %w", ns, err)
	}
	defer h.Close()
	return fn(h)
}

type sysctl struct{ key, value string }

// SetSysctl writes a sysctl (dotted or slash form, e.g. net.ipv4.ip_local_port_range) inside namespace ns.
func SetSysctl(ns, key, value string) error { return setSysctls(ns, sysctl{key, value}) }

func setSysctls(ns string, settings ...sysctl) error {
	return inNS(ns, func() error {
		for _, s := range settings {
			key := s.key
			if !strings.Contains(key, "/") {
				key = strings.ReplaceAll(key, ".", "/")
			}
			if err := os.WriteFile(filepath.Join("/proc/sys", key), []byte(s.value), 0o644); err != nil {
				return fmt.Errorf("sysctl %s=%s in %s: %w", s.key, s.value, ns, err)
			}
		}
		return nil
	})
}

// SetClientPorts sets the client's ephemeral port range (IPv4 and IPv6 share it).
func (l *Lab) SetClientPorts(low, high int) error {
	return SetSysctl(l.ClientNS(), "net.ipv4.ip_local_port_range", fmt.Sprintf("%d %d", low, high))
}
