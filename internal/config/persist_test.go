package config

import (
	"strings"
	"testing"
)

func TestStateSection(t *testing.T) {
	const services = "services: []\n"
	for _, tc := range []struct{ state, err string }{
		{"", ""},
		{"state: {persist: off}\n", ""},
		{"state: {persist: config-file}\n", ""},
		{"state: {path: /var/lib/x/running.yaml}\n", ""},
		{"state: {persist: sometimes}\n", `c.yaml:1: state.persist: "sometimes" is not one of`},
		{"state: {persist: off, path: /x/y}\n", "c.yaml:1: state.path: only applies to persist: state-file, not off"},
		{"state:\n  path: running.yaml\n", `c.yaml:2: state.path: "running.yaml" is not a clean absolute file path`},
		{"state: {path: /x/../y}\n", `state.path: "/x/../y" is not a clean absolute file path`},
	} {
		_, err := Parse("c.yaml", []byte(tc.state+services))
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%q: %v, want %q", tc.state, err, tc.err)
		}
	}
	if (State{}).Resolved() != (State{Persist: "state-file"}) {
		t.Error("the default persist is not state-file")
	}
}
