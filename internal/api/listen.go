package api

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultSocket is where the daemon serves the API unless told otherwise.
const DefaultSocket = "/run/sluice/sluice.sock"

// NetnsSocket is the default socket of `sluice --netns NAME`: one per network namespace, so
// that a daemon in another namespace never takes a command meant for this one.
func NetnsSocket(netns string) string { return "/run/sluice/netns/" + netns + "/sluice.sock" }

// ListenUnix listens on the unix socket path, the API's default listener. It creates the parent
// directory with mode 0755 when it is missing, and replaces a stale socket left by a daemon that
// did not exit cleanly, but only a socket and only when nothing answers on it. The socket is left
// with mode 0600, so that only its owner (root) may connect; until that chmod, right after bind,
// it has the mode the umask gives, which the usual umask 022 already closes to other users.
// Closing the listener removes the socket.
func ListenUnix(path string) (net.Listener, error) {
	if err := makeParent(path); err != nil {
		return nil, err
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// makeParent creates the directory of path with mode 0755, whatever the umask, when it is missing.
func makeParent(path string) error {
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.Chmod(dir, 0o755)
}

// removeStaleSocket removes path when it is a socket nobody answers on.
func removeStaleSocket(path string) error {
	info, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if info.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%s exists and is not a socket: remove it or choose another path", path)
	}
	if conn, err := net.DialTimeout("unix", path, time.Second); err == nil {
		conn.Close()
		return fmt.Errorf("%s: another process answers on it (is sluice already running?)", path)
	}
	return os.Remove(path)
}

// fullWarningEvery rate-limits the warning a listener logs when it is at its connection limit.
const fullWarningEvery = time.Minute

// LimitListener accepts at most max connections of l at once. At the limit, Accept waits for one of
// them to close and does not accept: new connections wait in the kernel's backlog (and beyond it
// the kernel drops their SYNs), so they take no file descriptor and no goroutine of the daemon. A
// warning names the listener, at most once a minute, while it is at its limit.
func LimitListener(l net.Listener, max int, log *slog.Logger) net.Listener {
	return &limitListener{Listener: l, max: max, log: log, slots: make(chan struct{}, max), closed: make(chan struct{})}
}

// limitListener is a listener with a connection limit; slots holds one token per open connection.
type limitListener struct {
	net.Listener
	max       int
	log       *slog.Logger
	slots     chan struct{}
	closed    chan struct{}
	closeOnce sync.Once
	full      atomic.Int64 // times Accept found the listener full since the last warning
	warned    atomic.Int64 // Unix nanoseconds of the last warning
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	default:
		l.warnFull()
		select {
		case l.slots <- struct{}{}:
		case <-l.closed:
			return nil, net.ErrClosed
		}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
}

// warnFull counts one wait at the limit and logs it unless a warning went out less than
// fullWarningEvery ago.
func (l *limitListener) warnFull() {
	waits := l.full.Add(1)
	now := time.Now().UnixNano()
	last := l.warned.Load()
	if now-last < int64(fullWarningEvery) || !l.warned.CompareAndSwap(last, now) {
		return
	}
	l.full.Add(-waits)
	l.log.Warn("listener at its connection limit: new connections wait in the kernel backlog",
		"addr", l.Addr().String(), "limit", l.max, "waits", waits)
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// limitConn gives its listener's slot back when it is closed, once.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
