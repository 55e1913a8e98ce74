package config

import "path/filepath"

// Persists are the ways the daemon keeps its running config across restarts.
var Persists = []string{"state-file", "config-file", "off"}

// DefaultPersist is the persist of a config that sets none.
const DefaultPersist = "state-file"

// State says how the daemon keeps the changes made through its API across a restart or a crash.
// It is read from the config file only: the API keeps it as the file sets it.
type State struct {
	// Persist is state-file (the running config is written to Path after every change and used
	// on start while the config file is unchanged), config-file (written back to the config
	// file, the version before kept beside it as FILE.bak) or off.
	Persist string `yaml:"persist,omitempty" json:"persist,omitempty"`
	// Path is the state file (persist: state-file); empty means /var/lib/sluice/running.yaml, or
	// /var/lib/sluice/netns/NAME/running.yaml for a daemon started with --netns NAME.
	Path string `yaml:"path,omitempty" json:"path,omitempty"`
}

// Resolved is s with the default filled in, for comparing two settings.
func (s State) Resolved() State {
	if s.Persist == "" {
		s.Persist = DefaultPersist
	}
	return s
}

func (s State) validate(fail func(path, format string, args ...any)) {
	persist := oneOf(s.Persist, Persists, DefaultPersist, "state.persist", fail)
	switch {
	case s.Path == "":
	case persist != "state-file":
		fail("state.path", "only applies to persist: state-file, not %s", persist)
	case !filepath.IsAbs(s.Path) || filepath.Clean(s.Path) != s.Path || s.Path == "/":
		fail("state.path", "%q is not a clean absolute file path", s.Path)
	}
}
