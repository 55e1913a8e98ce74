package testutil

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// IrregularPath is a path a file reader must refuse at once, naming it and what it is.
type IrregularPath struct {
	Name string // what the path is: "symlink to /dev/zero", "FIFO", "directory"
	Path string
	Kind string // how boundedread names it: "a character device", "a FIFO", "a directory"
}

// IrregularPaths makes, in a fresh temporary directory, the paths that would make an unbounded
// reader exhaust memory or block: a symbolic link to /dev/zero, a FIFO with no writer, and a
// directory.
func IrregularPaths(t testing.TB) []IrregularPath {
	t.Helper()
	dir := t.TempDir()
	link, fifo, sub := filepath.Join(dir, "zero.yaml"), filepath.Join(dir, "fifo.yaml"), filepath.Join(dir, "dir.yaml")
	if err := os.Symlink("/dev/zero", link); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	return []IrregularPath{
		{Name: "symlink to /dev/zero", Path: link, Kind: "a character device"},
		{Name: "FIFO", Path: fifo, Kind: "a FIFO"},
		{Name: "directory", Path: sub, Kind: "a directory"},
	}
}

// OversizeFile makes a sparse file of limit+1 bytes, one more than a reader may read.
func OversizeFile(t testing.TB, limit int64) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "oversize.yaml")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(limit + 1); err != nil {
		t.Fatal(err)
	}
	return path
}
