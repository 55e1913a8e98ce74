package state

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/boundedread"
	"github.com/sluicelb/sluice/internal/testutil"
)

// wantRefused fails t unless err refuses p as not a regular file.
func wantRefused(t *testing.T, what string, err error, p testutil.IrregularPath) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), p.Path+": is "+p.Kind+", not a regular file") {
		t.Errorf("%s, a %s: %v, want %s refused as not a regular file", what, p.Name, err, p.Path)
	}
}

// A config file symlinked to /dev/zero ran a SIGHUP reload out of memory; a FIFO hung it.
func TestReadConfigFileRefusesWhatIsNotARegularFile(t *testing.T) {
	for _, p := range testutil.IrregularPaths(t) {
		_, _, err := ReadConfigFile(p.Path)
		wantRefused(t, "ReadConfigFile", err, p)
		_, _, err = Open(p.Path, filepath.Join(t.TempDir(), "running.yaml"))
		wantRefused(t, "Open", err, p)
	}
	big := testutil.OversizeFile(t, boundedread.ConfigBytes)
	if _, _, err := ReadConfigFile(big); err == nil || !strings.Contains(err.Error(), "larger than 32 MiB") {
		t.Errorf("ReadConfigFile of 32 MiB + 1: %v, want larger than 32 MiB", err)
	}
}

// A state path that was a FIFO hung serve before its API opened. It is refused, and left alone.
func TestOpenRefusesAStatePathThatIsNotARegularFile(t *testing.T) {
	for _, p := range testutil.IrregularPaths(t) {
		r := newRig(t, baseConfig)
		r.state = p.Path
		_, _, err := Open(r.configFile, r.state)
		wantRefused(t, "Open", err, p)
		if _, err := os.Lstat(p.Path + ".old"); !os.IsNotExist(err) {
			t.Errorf("a %s state path was set aside: %v", p.Name, err)
		}
	}
}

// A state file over the limit is not read: it is set aside, as a corrupt one is.
func TestOpenSetsAsideAStateFileOverTheLimit(t *testing.T) {
	r := newRig(t, baseConfig)
	big := testutil.OversizeFile(t, boundedread.ConfigBytes)
	r.state = filepath.Join(filepath.Dir(r.configFile), "running.yaml")
	if err := os.Rename(big, r.state); err != nil {
		t.Fatal(err)
	}
	s, _ := r.open()
	if s.Start().Source != FromConfigFile || !strings.Contains(s.Start().Message, "larger than 32 MiB") ||
		!strings.Contains(s.Start().Message, "set aside") {
		t.Fatalf("start: %+v, want the config file, the state file set aside as larger than 32 MiB", s.Start())
	}
}

// Writing back to a config file that became a FIFO (or a device) fails at once, writing nothing.
func TestWriteBackRefusesAConfigFileThatIsNotARegularFile(t *testing.T) {
	for _, p := range testutil.IrregularPaths(t) {
		r := newRig(t, "state: {persist: config-file}\n"+baseConfig)
		s, cfg := r.open()
		if err := os.Remove(r.configFile); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(p.Path, r.configFile); err != nil {
			t.Fatal(err)
		}
		// The write-back follows the link to its target, and names what it found there.
		if err := s.Save(cfg, s.Origin(), false); err == nil || !strings.Contains(err.Error(), "is "+p.Kind+", not a regular file") {
			t.Errorf("Save to a config file linked to a %s: %v, want it refused as not a regular file", p.Name, err)
		}
		if _, err := os.Lstat(p.Path + ".bak"); !os.IsNotExist(err) {
			t.Errorf("a backup of a %s was written: %v", p.Name, err)
		}
	}
}

// A state write never goes through a symbolic link nor into a FIFO, a device or a directory: a
// link is replaced by the new file, the rest are refused and left as they were.
func TestWriteFileCannotBeRedirected(t *testing.T) {
	dir := t.TempDir()
	target, link := filepath.Join(dir, "target"), filepath.Join(dir, "running.yaml")
	if err := os.WriteFile(target, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(link, []byte("state"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(target); string(got) != "precious" {
		t.Fatalf("a write through a symbolic link changed its target: %q", got)
	}
	if info, err := os.Lstat(link); err != nil || !info.Mode().IsRegular() {
		t.Fatalf("the link was not replaced by a regular file: %v, %v", info, err)
	}
	for _, p := range testutil.IrregularPaths(t) {
		if p.Kind == "a character device" {
			continue // a symbolic link, replaced as above
		}
		before, _ := os.Lstat(p.Path)
		wantRefused(t, "WriteFile", WriteFile(p.Path, []byte("state"), 0o600), p)
		if after, err := os.Lstat(p.Path); err != nil || after.Mode() != before.Mode() {
			t.Errorf("the %s was replaced: %v, %v", p.Name, after, err)
		}
	}
	dev := testutil.IrregularPath{Name: "device", Path: "/dev/null", Kind: "a character device"}
	wantRefused(t, "WriteFile", replaceable(dev.Path), dev)
}
