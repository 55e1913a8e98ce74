// Package boundedread reads files an operator, a peer or an importer names, refusing what is not
// a regular file (a device, a FIFO, a socket, a directory) and what is larger than a stated limit,
// so that no path can hang a reader or exhaust the machine's memory.
package boundedread

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// Limits on what Sluice reads, documented in docs/security.md.
const (
	// ConfigBytes bounds a config file and a state file: 10,000 services with 2 backends each
	// take about 3 MiB of YAML.
	ConfigBytes = 32 << 20
	// ImportBytes bounds one file an importer reads (keepalived.conf and each of its includes,
	// an nftlb JSON file, an ipvsadm -S dump).
	ImportBytes = 16 << 20
	// TokenBytes bounds a bearer token file.
	TokenBytes = 4 << 10
)

// TooLargeError is a file over its limit.
type TooLargeError struct {
	Path  string
	Limit int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s: larger than %s, the most Sluice reads from such a file", e.Path, Size(e.Limit))
}

// NotRegularError is a path that names something other than a regular file.
type NotRegularError struct {
	Path string
	Kind string
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s: is %s, not a regular file: Sluice reads only regular files", e.Path, e.Kind)
}

// File reads the regular file at path (symbolic links followed), at most limit bytes. A FIFO is
// refused without blocking: the file is opened non-blocking and checked before any read.
func File(path string, limit int64) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Reader(f, path, limit)
}

// Open opens path for reading if it names a regular file, and refuses anything else without
// blocking on it.
func Open(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !info.Mode().IsRegular() {
		f.Close()
		return nil, &NotRegularError{Path: path, Kind: Kind(info.Mode())}
	}
	// A regular file never blocks; clearing O_NONBLOCK keeps ordinary semantics for the reader.
	if err := syscall.SetNonblock(int(f.Fd()), false); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Reader reads r to its end, at most limit bytes; name is what the error calls it. A regular
// file is read into one buffer of its size (a file that grows meanwhile is read on, to the limit).
func Reader(r io.Reader, name string, limit int64) ([]byte, error) {
	// ReadFrom reads on while MinRead bytes are free: so many more keep it from growing the buffer.
	buf := bytes.NewBuffer(make([]byte, 0, min(regularSize(r), limit)+bytes.MinRead))
	if _, err := buf.ReadFrom(io.LimitReader(r, limit+1)); err != nil {
		return nil, err
	}
	if int64(buf.Len()) > limit {
		return nil, &TooLargeError{Path: name, Limit: limit}
	}
	return buf.Bytes(), nil
}

// regularSize is the size of r when it is a regular file, else 0.
func regularSize(r io.Reader) int64 {
	f, ok := r.(interface{ Stat() (fs.FileInfo, error) })
	if !ok {
		return 0
	}
	info, err := f.Stat()
	if err != nil || !info.Mode().IsRegular() {
		return 0
	}
	return info.Size()
}

// IsLimit tells whether err is a refusal of this package (not a regular file, or too large).
func IsLimit(err error) bool {
	var large *TooLargeError
	var irregular *NotRegularError
	return errors.As(err, &large) || errors.As(err, &irregular)
}

// Kind names a file mode's type for an error: "a FIFO", "a directory".
func Kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return "not a regular file"
}

// Size writes a byte count the way the limits are documented: 32 MiB, 4 KiB.
func Size(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
