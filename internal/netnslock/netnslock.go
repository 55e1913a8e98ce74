// Package netnslock keeps one writer of Sluice's kernel state per network namespace: an flock(2)
// on a file named after the namespace's identity, which the kernel releases when its holder dies,
// so that a crash never leaves a namespace locked.
package netnslock

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/boundedread"
)

// DefaultDir is where the lock files are: /run is a tmpfs, emptied at boot like the namespaces.
const DefaultDir = "/run/sluice/lock"

// Holder says who holds a namespace's lock; the holder writes it into the lock file.
type Holder struct {
	PID     int       `json:"pid"`
	Command string    `json:"command"`
	Since   time.Time `json:"since"`
}

func (h Holder) String() string {
	if h.PID == 0 {
		return "a process that has not written its name yet"
	}
	return fmt.Sprintf("pid %d (%s, since %s)", h.PID, h.Command, h.Since.Format(time.RFC3339))
}

// HeldError is returned by Acquire when another process holds the namespace's lock.
type HeldError struct {
	// Namespace is the namespace's identity, like "net:[4026531840]".
	Namespace string
	Holder    Holder
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("network namespace %s is being written by %s", e.Namespace, e.Holder)
}

// Lock is the held lock of the calling process's network namespace.
type Lock struct {
	f    *os.File
	path string
}

// Namespace returns the identity of the calling thread's network namespace, like
// "net:[4026531840]": the inode of its nsfs file, the same for every process inside it.
func Namespace() (string, uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return "", 0, fmt.Errorf("reading the network namespace: %w", err)
	}
	return fmt.Sprintf("net:[%d]", st.Ino), st.Ino, nil
}

// Acquire takes the lock of the calling thread's network namespace in dir without waiting, and
// records command (what the caller is doing, for the error another process gets) as the holder.
// A lock held elsewhere is a *HeldError.
func Acquire(dir, command string) (*Lock, error) {
	name, ino, err := Namespace()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, fmt.Sprintf("net-%d", ino))
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, &HeldError{Namespace: name, Holder: readHolder(path)}
			}
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		// A holder removes the file on release: the lock just taken may be on a file already
		// unlinked, which the next process would not see. Take the one the path names.
		if same, err := isCurrent(f, path); err != nil || !same {
			f.Close()
			if err != nil {
				return nil, err
			}
			continue
		}
		l := &Lock{f: f, path: path}
		if err := l.write(Holder{PID: os.Getpid(), Command: command, Since: time.Now().UTC().Truncate(time.Second)}); err != nil {
			l.Release()
			return nil, err
		}
		return l, nil
	}
}

// isCurrent tells whether f is still the file at path.
func isCurrent(f *os.File, path string) (bool, error) {
	held, err := f.Stat()
	if err != nil {
		return false, err
	}
	now, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return os.SameFile(held, now), nil
}

func (l *Lock) write(h Holder) error {
	data, err := json.Marshal(h)
	if err != nil {
		return err
	}
	if err := l.f.Truncate(0); err != nil {
		return err
	}
	_, err = l.f.WriteAt(append(data, '\n'), 0)
	return err
}

// holderBytes bounds a lock file: one Holder in JSON, its command line included.
const holderBytes = 64 << 10

// readHolder reads who holds the lock at path; a holder caught before writing, or a file that is
// not a lock's, reads as zero.
func readHolder(path string) Holder {
	var h Holder
	if data, err := boundedread.File(path, holderBytes); err == nil {
		_ = json.Unmarshal(data, &h)
	}
	return h
}

// Release removes the lock file and frees the lock. A process that dies frees it too (the
// kernel drops its flock), leaving the file behind for the next holder to reuse.
func (l *Lock) Release() {
	if l == nil || l.f == nil {
		return
	}
	_ = os.Remove(l.path)
	_ = l.f.Close()
	l.f = nil
}
