package api

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"time"
)

// DefaultSocket is where the daemon serves the API unless told otherwise.
const DefaultSocket = "/run/sluice/sluice.sock"

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
