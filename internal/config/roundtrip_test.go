package config

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"go.yaml.in/yaml/v3"
)

// persisted are the two ways the daemon writes a running config back: the state file (JSON,
// which is YAML) and the config file (persist: config-file, YAML).
var persisted = map[string]func(*Config) ([]byte, error){
	"json": func(c *Config) ([]byte, error) {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		err := enc.Encode(c)
		return b.Bytes(), err
	},
	"yaml": func(c *Config) ([]byte, error) { return yaml.Marshal(c) },
}

// checkPersists fails unless cfg, written as the daemon writes it back, parses to cfg again: a
// daemon restarted from its state file runs what it ran before.
func checkPersists(t *testing.T, cfg *Config) {
	t.Helper()
	for name, encode := range persisted {
		data, err := encode(cfg)
		if err != nil {
			t.Fatalf("%s: encoding: %v", name, err)
		}
		again, err := Parse("persisted."+name, data)
		if err != nil {
			t.Fatalf("%s: the written config does not parse: %v\n%s", name, err, data)
		}
		if !reflect.DeepEqual(cfg, again) {
			t.Fatalf("%s: the written config parses to another one\nwritten:\n%s\nread (Go):\n%#v\nwas:\n%#v", name, data, again, cfg)
		}
	}
}

func TestGoodConfigsPersist(t *testing.T) {
	files, _ := filepath.Glob("testdata/good/*.yaml")
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			cfg, err := Load(f)
			if err != nil {
				t.Fatal(err)
			}
			checkPersists(t, cfg)
		})
	}
}

// FuzzParse: whatever the bytes, Parse does not panic, and a config it accepts persists.
func FuzzParse(f *testing.F) {
	for _, dir := range []string{"testdata/good", "testdata/bad"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz.yaml", data)
		if err != nil {
			return
		}
		checkPersists(t, cfg)
	})
}

// TestDropEmptyListsOfARecursiveType: a type that holds itself is listed once and walked as deep
// as its value goes.
func TestDropEmptyListsOfARecursiveType(t *testing.T) {
	type node struct {
		Tags     []string `json:"tags,omitempty"`
		Children []*node  `json:"children,omitempty"`
	}
	n := &node{Tags: []string{}, Children: []*node{{Tags: []string{}, Children: []*node{}}}}
	DropEmptyLists(n)
	if n.Tags != nil || n.Children[0].Tags != nil || n.Children[0].Children != nil {
		t.Fatalf("empty lists left: %+v %+v", n, n.Children[0])
	}
}
