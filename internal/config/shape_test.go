package config

import (
	"strings"
	"testing"
)

// TestEveryErrorAtOnce: unknown keys, values of the wrong type and validation failures of one
// file come back together, in line order, each with its path; a value that did not decode is
// reported once, not again by validation.
func TestEveryErrorAtOnce(t *testing.T) {
	_, err := Parse("x.yaml", []byte(`datapath: bpf
services:
  - name: web
    vip: 10.91.9.100
    protcol: udp
    port: 80
    backends:
      - {address: 10.91.2.11, weight: heavy}
      - {address: 10.1.2, weigth: 2}
  - name: 9lives
    vip: [10.91.9.101]
    port: 80
    health_check: {type: http, rise: 2, rise: 3}
    backends: {address: 10.91.2.12}
`))
	want := strings.Join([]string{
		`x.yaml:1: datapath: "bpf" is not one of [nft ebpf]`,
		`x.yaml:5: services[0].protcol: unknown field (did you mean protocol?)`,
		`x.yaml:8: services[0].backends[0].weight: expected a whole number, found "heavy"`,
		`x.yaml:9: services[0].backends[1].weigth: unknown field (did you mean weight?)`,
		`x.yaml:9: services[0].backends[1].address: "10.1.2" is not an IP address`,
		`x.yaml:10: services[1].name: "9lives" is not a service name (a letter, then up to 31 letters, digits, '-' or '_')`,
		`x.yaml:11: services[1].vip: expected a text value, found a list`,
		`x.yaml:13: services[1].health_check.rise: already set at line 13: give a key once`,
		`x.yaml:14: services[1].backends: expected a list, found a mapping`,
	}, "\n")
	if err == nil || err.Error() != want {
		t.Fatalf("got\n%v\nwant\n%s", err, want)
	}
}

// TestMergeKeys: keys a merge key brings in are checked where they land.
func TestMergeKeys(t *testing.T) {
	_, err := Parse("x.yaml", []byte(`services:
  - &web
    name: web
    vip: 10.91.9.100
    port: 80
    backends: [{address: 10.91.2.11}]
  - <<: *web
    name: api
    port: 81
  - <<: [{protcol: udp}]
    name: dns
    vip: 10.91.9.100
    port: 53
    backends: [{address: 10.91.2.11}]
`))
	want := "x.yaml:10: services[2].protcol: unknown field (did you mean protocol?)"
	if err == nil || err.Error() != want {
		t.Fatalf("got\n%v\nwant\n%s", err, want)
	}
}

func TestEditDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"protcol", "protocol", 1}, {"weigth", "weight", 2}, {"kitten", "sitting", 3}, {"", "abc", 3}} {
		if got := editDistance(c.a, c.b); got != c.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

// TestMergedValueOverridden: a value a merge key brings in is checked even where the mapping's
// own key overrides it, and the decoder never reads it.
func TestMergedValueOverridden(t *testing.T) {
	_, err := Parse("x.yaml", []byte(`services:
  - name: web
    vip: 10.91.9.100
    port: 80
    <<: {sh_port: maybe}
    sh_port: true
    backends: [{address: 10.91.2.11}]
`))
	want := `x.yaml:5: services[0].sh_port: expected true or false, found "maybe"`
	if err == nil || err.Error() != want {
		t.Fatalf("got\n%v\nwant\n%s", err, want)
	}
}
