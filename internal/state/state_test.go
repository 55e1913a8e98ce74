package state

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/config"
)

const baseConfig = `services:
  - name: web
    vip: 10.0.0.1
    port: 80
    backends: [{address: 10.0.1.1}]
`

// rig is a config file and the state file beside it.
type rig struct {
	t                 *testing.T
	configFile, state string
}

func newRig(t *testing.T, text string) *rig {
	dir := t.TempDir()
	r := &rig{t: t, configFile: filepath.Join(dir, "sluice.yaml"), state: filepath.Join(dir, "state", "running.yaml")}
	r.writeConfig(text)
	return r
}

func (r *rig) writeConfig(text string) {
	r.t.Helper()
	if err := os.WriteFile(r.configFile, []byte(text), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) open() (*Store, *config.Config) {
	r.t.Helper()
	s, cfg, err := Open(r.configFile, r.state)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Logf("%s: %s", s.Start().Source, s.Start().Message)
	return s, cfg
}

// apiChange adds a backend the way the API would, and saves the result.
func (r *rig) apiChange(s *Store, cfg *config.Config, addr string) *config.Config {
	r.t.Helper()
	next := cfg.Clone()
	next.Services[0].Backends = append(next.Services[0].Backends, config.Backend{Address: config.IPOf(addr)})
	if errs := next.Validate(); len(errs) > 0 {
		r.t.Fatal(errs)
	}
	if err := s.Save(next, s.Origin(), false); err != nil {
		r.t.Fatal(err)
	}
	return next
}

func backends(cfg *config.Config) int { return len(cfg.Services[0].Backends) }

func TestStateFileWinsWhileTheConfigFileIsUnchanged(t *testing.T) {
	r := newRig(t, baseConfig)
	s, cfg := r.open()
	if s.Start().Source != FromConfigFile || !strings.Contains(s.Start().Message, "no state file") {
		t.Fatalf("first start: %+v", s.Start())
	}
	r.apiChange(s, cfg, "10.0.1.2")
	s, cfg = r.open()
	if s.Start().Source != FromStateFile || backends(cfg) != 2 {
		t.Fatalf("after an API change: %+v, %d backends, want the state file's 2", s.Start(), backends(cfg))
	}
	// And again: a state that won is kept until a change replaces it.
	if s, cfg = r.open(); s.Start().Source != FromStateFile || backends(cfg) != 2 {
		t.Fatalf("second restart: %+v, %d backends", s.Start(), backends(cfg))
	}
}

func TestConfigFileWins(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(r *rig)
		why    string
	}{
		{"edited", func(r *rig) { r.writeConfig(baseConfig + "# edited\n") }, "changed since"},
		{"touched after", func(r *rig) {
			future := time.Now().Add(time.Minute)
			if err := os.Chtimes(r.configFile, future, future); err != nil {
				r.t.Fatal(err)
			}
		}, "after it was written"},
		{"corrupt", func(r *rig) {
			data, _ := os.ReadFile(r.state)
			if err := os.WriteFile(r.state, data[:len(data)/2], 0o600); err != nil {
				r.t.Fatal(err)
			}
		}, "running.yaml:"},
		{"no header", func(r *rig) {
			if err := os.WriteFile(r.state, []byte(baseConfig), 0o600); err != nil {
				r.t.Fatal(err)
			}
		}, "does not start with"},
		{"another config file", func(r *rig) {
			other := filepath.Join(filepath.Dir(r.configFile), "other.yaml")
			if err := os.Rename(r.configFile, other); err != nil {
				r.t.Fatal(err)
			}
			r.configFile = other
		}, "another config file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, baseConfig)
			s, cfg := r.open()
			r.apiChange(s, cfg, "10.0.1.2")
			tc.change(r)
			s, cfg = r.open()
			if s.Start().Source != FromConfigFile || backends(cfg) != 1 || !strings.Contains(s.Start().Message, tc.why) {
				t.Fatalf("%+v, %d backends: want the config file's 1, and %q", s.Start(), backends(cfg), tc.why)
			}
			if _, err := os.Stat(r.state); !os.IsNotExist(err) {
				t.Fatalf("the rejected state file is still in place: %v", err)
			}
			if _, err := os.Stat(r.state + ".old"); err != nil || !strings.Contains(s.Start().Message, "set aside") {
				t.Fatalf("the rejected state file was not set aside: %v", err)
			}
		})
	}
}

func TestReloadReplacesTheState(t *testing.T) {
	r := newRig(t, baseConfig)
	s, cfg := r.open()
	r.apiChange(s, cfg, "10.0.1.2")
	r.writeConfig(strings.Replace(baseConfig, "10.0.1.1", "10.0.1.3", 1))
	reloaded, origin, err := ReadConfigFile(r.configFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Save(reloaded, origin, true); err != nil {
		t.Fatal(err)
	}
	s, cfg = r.open()
	if s.Start().Source != FromStateFile || backends(cfg) != 1 || cfg.Services[0].Backends[0].Address.String() != "10.0.1.3" {
		t.Fatalf("after a reload: %+v, backends %v", s.Start(), cfg.Services[0].Backends)
	}
}

func TestPersistOff(t *testing.T) {
	r := newRig(t, "state: {persist: off}\n"+baseConfig)
	s, cfg := r.open()
	r.apiChange(s, cfg, "10.0.1.2")
	if _, err := os.Stat(r.state); !os.IsNotExist(err) {
		t.Fatalf("persist: off wrote a state file: %v", err)
	}
	if s, _ := r.open(); !strings.Contains(s.Start().Message, "off") {
		t.Fatalf("start: %+v", s.Start())
	}
}

func TestPersistConfigFile(t *testing.T) {
	text := "state: {persist: config-file}\n" + baseConfig
	r := newRig(t, text)
	s, cfg := r.open()
	r.apiChange(s, cfg, "10.0.1.2")
	if bak, err := os.ReadFile(r.configFile + ".bak"); err != nil || string(bak) != text {
		t.Fatalf("the backup holds %q, %v; want the file before", bak, err)
	}
	if _, err := os.Stat(r.state); !os.IsNotExist(err) {
		t.Fatalf("persist: config-file wrote a state file: %v", err)
	}
	if s, cfg = r.open(); backends(cfg) != 2 || s.Start().Source != FromConfigFile {
		t.Fatalf("restart: %+v, %d backends, want the written-back 2", s.Start(), backends(cfg))
	}
	// A reload reads the file: nothing to write back, and the backup stays the version before.
	if err := s.Save(cfg, s.Origin(), true); err != nil {
		t.Fatal(err)
	}
	if bak, _ := os.ReadFile(r.configFile + ".bak"); string(bak) != text {
		t.Fatalf("a reload rewrote the backup: %q", bak)
	}
}

func TestStateFileOutsideTheDefault(t *testing.T) {
	r := newRig(t, "")
	path := filepath.Join(t.TempDir(), "elsewhere.yaml")
	r.writeConfig("state: {path: " + path + "}\n" + baseConfig)
	s, cfg := r.open()
	r.apiChange(s, cfg, "10.0.1.2")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("state.path: %v", err)
	}
	if s, _ := r.open(); s.Start().Source != FromStateFile {
		t.Fatalf("restart: %+v", s.Start())
	}
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "f")
	for _, text := range []string{"one", "two"} {
		if err := WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(path); err != nil || string(got) != text {
			t.Fatalf("read back %q, %v; want %q", got, err, text)
		}
	}
	if info, _ := os.Stat(path); info.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", info.Mode())
	}
	// A rename that fails (a directory in the way) leaves no temporary file behind.
	blocked := filepath.Join(dir, "sub", "dir")
	if err := os.MkdirAll(filepath.Join(blocked, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(blocked, []byte("three"), 0o600); err == nil {
		t.Fatal("WriteFile over a directory succeeded")
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "sub"))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "dir f" {
		t.Fatalf("left in the directory: %v", names)
	}
}
