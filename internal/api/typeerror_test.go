package api

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
)

// TestWrongTypePath: the path of the first value, in document order, that does not decode into
// its place, through struct fields (by tag, case folded, embedded ones included), slices, maps,
// pointers and types that decode themselves (UnmarshalJSON, UnmarshalText); none when every value
// decodes.
func TestWrongTypePath(t *testing.T) {
	type attrs struct {
		MED *uint32 `json:"med"`
	}
	type backend struct {
		Address config.IP `json:"address"`
		Weight  int       `json:"weight"`
	}
	type peer struct {
		attrs
		Name string `json:"name"`
	}
	type body struct {
		VIP      config.IP         `json:"vip"`
		Port     config.Range      `json:"port"`
		Backends []backend         `json:"backends"`
		Labels   map[string]string `json:"labels"`
		Peer     *peer             `json:"peer"`
		Gateway  netip.Addr        `json:"gateway"`
		Hidden   int               `json:"-"`
		Plain    bool
	}
	for _, tc := range []struct{ name, body, path string }{
		{"custom unmarshaler", `{"vip": 5}`, "vip"},
		{"range as a boolean", `{"vip": "192.0.2.1", "port": true}`, "port"},
		{"second element", `{"backends": [{"weight": 1}, {"address": "10.0.0.1", "weight": "5"}]}`, "backends[1].weight"},
		{"address as a list", `{"backends": [{"address": ["10.0.0.1"]}]}`, "backends[0].address"},
		{"the first in document order", `{"port": [], "vip": 5}`, "port"},
		{"map value", `{"labels": {"a": "x", "b": 2}}`, "labels.b"},
		{"embedded through a pointer", `{"peer": {"name": "r1", "med": "low"}}`, "peer.med"},
		{"key as given, case folded", `{"PORT": false}`, "PORT"},
		{"Go name", `{"Plain": 1}`, "Plain"},
		{"not an array", `{"backends": {}}`, "backends"},
		{"a struct that decodes from text", `{"gateway": "10.0.0.1", "port": {}}`, "port"},
		{"every value decodes", `{"vip": "192.0.2.1", "port": 80, "backends": [{"weight": 2}], "peer": null, "labels": null}`, ""},
		{"unknown and ignored fields are not type errors", `{"colour": 1, "Hidden": "x"}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, ok := wrongTypePath([]byte(tc.body), reflect.TypeFor[*body]())
			if path != tc.path || ok != (tc.path != "") {
				t.Errorf("wrongTypePath(%s) = %q, %v; want %q", tc.body, path, ok, tc.path)
			}
		})
	}
}
