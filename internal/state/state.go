// Package state keeps the daemon's running config (the config file plus the changes made through
// the API) across a restart or a crash, as the config's state section says: in a state file used
// on start while the config file is unchanged, or written back to the config file.
package state

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicelb/sluice/internal/boundedread"
	"github.com/sluicelb/sluice/internal/config"
)

// DefaultPath is the state file of a daemon in the host's network namespace.
const DefaultPath = "/var/lib/sluice/running.yaml"

// NetnsPath is the default state file of a daemon in the named network namespace ns.
func NetnsPath(ns string) string { return filepath.Join("/var/lib/sluice/netns", ns, "running.yaml") }

// Origin identifies one version of the config file: the running config is that version plus the
// changes made through the API since.
type Origin struct {
	ConfigFile string    `json:"config_file"`
	SHA256     string    `json:"config_sha256"`
	ModTime    time.Time `json:"config_mtime"`
}

// header is the first line of a state file, after headerPrefix.
type header struct {
	Origin
	Written time.Time `json:"written"`
}

// headerPrefix starts a state file: the rest of the file is a config file like any other.
const headerPrefix = "# sluice-state: "

// Source names where the daemon's running config came from on start.
type Source string

// Sources of the running config.
const (
	FromConfigFile Source = "config-file"
	FromStateFile  Source = "state-file"
)

// Start is where the running config came from on start, and why.
type Start struct {
	Source  Source
	Message string
}

// ReadConfigFile loads and validates the config file at path, and tells which version it read.
func ReadConfigFile(path string) (*config.Config, Origin, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, Origin{}, err
	}
	data, info, err := readFile(abs)
	if err != nil {
		return nil, Origin{}, err
	}
	cfg, err := config.Parse(path, data)
	if err != nil {
		return nil, Origin{}, err
	}
	sum := sha256.Sum256(data)
	return cfg, Origin{ConfigFile: abs, SHA256: hex.EncodeToString(sum[:]), ModTime: info.ModTime().UTC()}, nil
}

// readFile reads the regular file at path, at most boundedread.ConfigBytes, and tells its mode and
// modification time as of that read. Anything else (a FIFO, a device, a directory, through a
// symbolic link or not) is refused at once.
func readFile(path string) ([]byte, fs.FileInfo, error) {
	f, err := boundedread.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	data, err := boundedread.Reader(f, path, boundedread.ConfigBytes)
	if err != nil {
		return nil, nil, err
	}
	return data, info, nil
}

// Store writes the running config where its state section says, after every change.
type Store struct {
	configFile  string // absolute
	defaultPath string // the state file when state.path is unset
	start       Start
	origin      Origin
}

// Open loads the config the daemon starts from: the state file when the config file's state
// section asks for one and it was written after the config file and from that same version of
// it, else the config file, and then a rejected state file is set aside as PATH.old. defaultPath
// is the state file when the config sets no state.path. Only a config file that does not load,
// and a state path that names something other than a regular file, are errors.
func Open(configFile, defaultPath string) (*Store, *config.Config, error) {
	cfg, origin, err := ReadConfigFile(configFile)
	if err != nil {
		return nil, nil, err
	}
	s := &Store{configFile: origin.ConfigFile, defaultPath: defaultPath, origin: origin}
	fromFile := func(why string) {
		s.start = Start{Source: FromConfigFile, Message: "started from the config file " + origin.ConfigFile + ": " + why}
	}
	switch st := cfg.State.Resolved(); st.Persist {
	case "off":
		fromFile("persistence is off (state.persist: off)")
	case "config-file":
		fromFile("changes made through the API are written back to it (state.persist: config-file)")
	default:
		path := s.path(cfg)
		saved, savedOrigin, err := readStateFile(path, origin)
		var irregular *boundedread.NotRegularError
		switch {
		case errors.Is(err, fs.ErrNotExist):
			fromFile("no state file at " + path + " yet")
		case errors.As(err, &irregular):
			return nil, nil, fmt.Errorf("the state file (state.path): %w", err)
		case err != nil:
			why := fmt.Sprintf("the state file %s is not used (%v)", path, err)
			if rerr := os.Rename(path, path+".old"); rerr != nil {
				why += fmt.Sprintf(", and setting it aside failed: %v", rerr)
			} else {
				why += "; set aside as " + path + ".old"
			}
			fromFile(why)
		default:
			cfg = saved
			s.start = Start{Source: FromStateFile, Message: fmt.Sprintf("started from the state file %s, written %s from the config file %s, which has not changed since: it holds the changes made through the API",
				path, savedOrigin.Written.Local().Format(time.RFC3339), origin.ConfigFile)}
		}
	}
	return s, cfg, nil
}

// rejected tells why a state file written from saved must not be used over the config file at
// file, or nil when it is to be used.
func rejected(file Origin, saved header) error {
	switch {
	case saved.ConfigFile != file.ConfigFile:
		return fmt.Errorf("it was written from another config file, %s", saved.ConfigFile)
	case saved.SHA256 != file.SHA256:
		return errors.New("the config file changed since it was written")
	case !saved.Written.After(file.ModTime):
		return fmt.Errorf("the config file was modified at %s, after it was written (%s)",
			file.ModTime.Local().Format(time.RFC3339Nano), saved.Written.Local().Format(time.RFC3339Nano))
	}
	return nil
}

// Start tells where the running config came from on start.
func (s *Store) Start() Start { return s.start }

// Origin is the version of the config file the running config started from.
func (s *Store) Origin() Origin { return s.origin }

// path is the state file cfg asks for.
func (s *Store) path(cfg *config.Config) string {
	if cfg.State.Path != "" {
		return cfg.State.Path
	}
	return s.defaultPath
}

// Save records cfg, the running config derived from the config file's version from, as cfg's
// state section says. reload tells that cfg is the config file itself, just read: it replaces
// what the state file held, and there is nothing to write back to the file.
func (s *Store) Save(cfg *config.Config, from Origin, reload bool) error {
	switch cfg.State.Resolved().Persist {
	case "off":
		return nil
	case "config-file":
		if reload {
			return nil
		}
		return s.writeBack(cfg)
	}
	head, err := json.Marshal(header{Origin: from, Written: time.Now().UTC()})
	if err != nil {
		return err
	}
	var b bytes.Buffer
	b.WriteString(headerPrefix)
	b.Write(head)
	b.WriteString("\n# The running config of `sluice serve`: the config file above plus the changes made through\n" +
		"# its API, used on start while that file is unchanged (docs/operations.md). Any other edit is lost.\n")
	// JSON, which is YAML: 10,000 services encode in 8 ms, against 0.5 s as YAML.
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(cfg); err != nil {
		return err
	}
	return WriteFile(s.path(cfg), b.Bytes(), 0o600)
}

// writeBack replaces the config file with cfg, keeping the version before as FILE.bak.
func (s *Store) writeBack(cfg *config.Config) error {
	target, err := filepath.EvalSymlinks(s.configFile)
	if err != nil {
		return err
	}
	before, info, err := readFile(target)
	if err != nil {
		return err
	}
	body, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	if err := WriteFile(target+".bak", before, info.Mode().Perm()); err != nil {
		return err
	}
	head := "# Written back by `sluice serve` after a change made through its API (state.persist: config-file);\n" +
		"# the version before is " + filepath.Base(target) + ".bak.\n"
	return WriteFile(target, append([]byte(head), body...), info.Mode().Perm())
}

// readStateFile reads a state file written from the config file of origin: the config it holds
// and the header that says where from. A file from another config file, or from an older version
// of it, is refused by its header, before its config is parsed (which takes seconds and hundreds
// of megabytes at 10,000 services).
func readStateFile(path string, origin Origin) (*config.Config, header, error) {
	data, _, err := readFile(path)
	if err != nil {
		return nil, header{}, err
	}
	first, _, _ := bytes.Cut(data, []byte("\n"))
	var h header
	if !strings.HasPrefix(string(first), headerPrefix) {
		return nil, h, errors.New("it does not start with a " + strings.TrimSpace(headerPrefix) + " line")
	}
	if err := json.Unmarshal(first[len(headerPrefix):], &h); err != nil {
		return nil, h, fmt.Errorf("%s:1: %w", path, err)
	}
	if err := rejected(origin, h); err != nil {
		return nil, h, err
	}
	cfg, err := config.Parse(path, data)
	return cfg, h, err
}

// WriteFile replaces the file at path with data atomically, creating its directory: a crash at
// any point leaves the old file or the new one, never a part of either. The data is written to
// a temporary file in the same directory, synced, and renamed over path, whose directory is then
// synced so that the rename itself survives a power loss. The rename replaces a symbolic link at
// path, never the file it points to; a path that is a FIFO, a device, a socket or a directory is
// refused, without opening it.
func WriteFile(path string, data []byte, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := replaceable(path); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return err
	}
	if err := tmp.Chmod(perm); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	// O_DIRECTORY: whatever took the directory's name since cannot make this open block.
	d, err := os.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// replaceable refuses a path WriteFile must not rename over: anything but a regular file, a
// symbolic link (replaced itself) or nothing.
func replaceable(path string) error {
	info, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case info.Mode().IsRegular(), info.Mode()&fs.ModeSymlink != 0:
		return nil
	}
	return &boundedread.NotRegularError{Path: path, Kind: boundedread.Kind(info.Mode())}
}
