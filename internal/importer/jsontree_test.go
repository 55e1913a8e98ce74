package importer

import (
	"strings"
	"testing"
)

// TestNftlbRepeatedKeys: a key repeated in an object takes its last value, as nftlb reads it,
// with a warning naming the key and both lines.
func TestNftlbRepeatedKeys(t *testing.T) {
	res, err := Nftlb("testdata/nftlb/repeated-keys.json", Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`testdata/nftlb/repeated-keys.json:14: key "ether-addr" is repeated (first at line 13)`,
		`testdata/nftlb/repeated-keys.json:21: key "ether-addr" is repeated (first at line 20)`,
		`testdata/nftlb/repeated-keys.json:30: key "weight" is repeated (first at line 29)`,
	}
	if len(res.Warnings) != len(want) {
		t.Fatalf("warnings %q, want %d", res.Warnings, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(res.Warnings[i], w) {
			t.Errorf("warning %q, want it to start with %q", res.Warnings[i], w)
		}
	}
	if w := res.Services[0].Backends[1].Weight; w == nil || *w != 3 {
		t.Errorf("web2's weight %v, want the last value, 3", w)
	}
}

// TestParseJSON: lines of values, errors at their line and speaking of JSON.
func TestParseJSON(t *testing.T) {
	root, _, err := parseJSON("f.json", []byte("{\n \"a\": [\n  1,\n  \"x\"\n ],\n \"b\": null, \"c\": true\n}\n"))
	if err != nil {
		t.Fatal(err)
	}
	a := root.get("a")
	if a.line != 2 || a.items[0].line != 3 || a.items[0].text != "1" || a.items[1].line != 4 || root.get("b").kind != jsonNull || root.get("c").text != "true" {
		t.Errorf("parsed %+v", root)
	}
	for input, want := range map[string]string{
		"{\n\"a\": 1,\n\"b\" 2}":      "f.json:3: not JSON: ",
		"{\n\"a\": [1,\n":             "f.json:3: not JSON: the file ends inside a value",
		"{}\n{}":                      "f.json:2: not JSON: more after the end of the top value",
		strings.Repeat("[", 100):      "f.json:1: objects and arrays nested more than 64 deep",
		"{\"a\": 1, \"a\": {\"b\":}}": "f.json:1: not JSON: ", // the rest is Go's wording, which differs between releases
		"{\"a\": \"x":                 "f.json:1: not JSON: the file ends inside a value",
		"{\"a\": 1}}":                 "f.json:1: not JSON: ",
	} {
		_, _, err := parseJSON("f.json", []byte(input))
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("parseJSON(%q) = %v, want %q…", input, err, want)
		}
	}
}
