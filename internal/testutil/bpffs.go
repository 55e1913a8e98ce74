package testutil

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// PrivateBPFFS mounts a BPF filesystem of the test's own, unmounted when it ends (also when it
// fails), and returns the path name in it, for the test's pins.
func PrivateBPFFS(t testing.TB, name string) string {
	t.Helper()
	fs := filepath.Join(t.TempDir(), "bpffs")
	if err := os.Mkdir(fs, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("bpf", fs, "bpf", 0, "mode=0700"); err != nil {
		t.Fatalf("mounting a BPF filesystem: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(fs, unix.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", fs, err)
		}
	})
	return filepath.Join(fs, name)
}
