package config

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestFullNATSource: a fullnat service takes a source address of its VIP's family, kept unmapped,
// and writes it back in YAML and JSON; a service without one writes no key.
func TestFullNATSource(t *testing.T) {
	c, err := Parse("fullnat.yaml", []byte(`
services:
  - name: web
    vip: 10.91.9.100
    port: 80
    mode: fullnat
    fullnat_source: "::ffff:10.91.2.1"
    backends: [{address: 10.91.2.11}]
  - name: plain
    vip: 10.91.9.101
    port: 80
    mode: fullnat
    backends: [{address: 10.91.2.11}]
`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Services[0].FullNATSource.Addr, netip.MustParseAddr("10.91.2.1"); got != want {
		t.Errorf("fullnat_source is %s, want %s", got, want)
	}
	out, err := yaml.Marshal(c.Services)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(out), "fullnat_source: 10.91.2.1\n"); n != 1 || strings.Count(string(out), "fullnat_source") != 1 {
		t.Errorf("YAML:\n%s", out)
	}
	js, err := json.Marshal(c.Services)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(js), `"fullnat_source"`); n != 1 || !strings.Contains(string(js), `"fullnat_source":"10.91.2.1"`) {
		t.Errorf("JSON: %s", js)
	}
}
