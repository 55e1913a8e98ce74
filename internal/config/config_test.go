package config

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestGoodConfigs(t *testing.T) {
	files, _ := filepath.Glob("testdata/good/*.yaml")
	if len(files) == 0 {
		t.Fatal("no good configs")
	}
	for _, f := range files {
		if _, err := Load(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestBadConfigs checks each file in testdata/bad fails with the error its first line announces.
func TestBadConfigs(t *testing.T) {
	files, _ := filepath.Glob("testdata/bad/*.yaml")
	if len(files) == 0 {
		t.Fatal("no bad configs")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			want := firstLineWant(t, f)
			_, err := Parse(filepath.Base(f), mustRead(t, f))
			if err == nil {
				t.Fatalf("accepted; want error %q", want)
			}
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("error\n  %v\nwant it to contain\n  %s", err, want)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	cfg, err := Parse("x", []byte("services:\n- {name: a, vip: 10.0.0.1, port: 80, backends: [{address: 10.0.0.2}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Services[0]
	if cfg.Datapath != "nft" || s.Protocol != "tcp" || s.Mode != "nat" || s.Scheduler != "maglev" || s.Backends[0].WeightOrDefault() != 1 {
		t.Fatalf("defaults not applied: %+v", cfg)
	}
}

func TestEmptyFile(t *testing.T) {
	if _, err := Parse("empty.yaml", nil); err == nil || !strings.Contains(err.Error(), "empty.yaml: empty config") {
		t.Fatalf("got %v", err)
	}
}

func TestRange(t *testing.T) {
	//nolint:gocritic // mapKey: the spaces in " 1 - 2 " are the point (parsing trims them).
	for in, want := range map[string]Range{"80": {First: 80, Last: 80}, "8000-8010": {First: 8000, Last: 8010}, " 1 - 2 ": {First: 1, Last: 2}} {
		got, err := ParseRange(in)
		if err != nil || got != want {
			t.Errorf("ParseRange(%q) = %v, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "a", "1-", "-1", "1-2-3"} {
		if _, err := ParseRange(in); err == nil {
			t.Errorf("ParseRange(%q) accepted", in)
		}
	}
}

func TestRangeJSON(t *testing.T) {
	for in, want := range map[string]string{`80`: "80", `"8000-8010"`: "8000-8010"} {
		var r Range
		if err := json.Unmarshal([]byte(in), &r); err != nil || r.Err() != nil || r.String() != want {
			t.Errorf("%s decoded to %v (%v, %v)", in, r, err, r.Err())
		}
		out, _ := json.Marshal(r)
		if string(out) != in {
			t.Errorf("%s encoded back as %s", in, out)
		}
	}
	var r Range
	if err := json.Unmarshal([]byte(`"http"`), &r); err != nil || r.Err() == nil {
		t.Errorf(`"http" decoded without a deferred error: %v %v`, err, r.Err())
	}
	if err := json.Unmarshal([]byte(`true`), &r); err == nil {
		t.Error("true decoded as a range")
	}
}

func firstLineWant(t *testing.T, path string) string {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan()
	want, ok := strings.CutPrefix(sc.Text(), "# want: ")
	if !ok {
		t.Fatalf("%s: first line must be '# want: <error>'", path)
	}
	return want
}

func mustRead(t *testing.T, path string) []byte {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestNATWithBGPWarns: a nat service announced over BGP is allowed (one node may announce it) but
// warned about; dsr and fullnat services, or nat without bgp, are not.
func TestNATWithBGPWarns(t *testing.T) {
	const services = `services:
  - {name: a, vip: 10.0.0.1, port: 80, mode: dsr, backends: [{address: 10.0.1.1}]}
  - {name: b, vip: 10.0.0.1, port: 81, backends: [{address: 10.0.1.1}]}
`
	withBGP, err := Parse("x", []byte("bgp: {asn: 65100, peers: [{address: 10.9.0.1, asn: 65000}]}\n"+services))
	if err != nil {
		t.Fatal(err)
	}
	if w := withBGP.Warnings(); len(w) != 1 || !strings.HasPrefix(w[0], "services[1].mode: nat with bgp") {
		t.Fatalf("warnings %q", w)
	}
	without, err := Parse("x", []byte(services))
	if err != nil {
		t.Fatal(err)
	}
	if w := without.Warnings(); len(w) != 0 {
		t.Fatalf("warnings without bgp: %q", w)
	}
}

// TestExamples: every example config loads, with no warning, and opens with a comment saying
// what it shows.
func TestExamples(t *testing.T) {
	files, _ := filepath.Glob("../../examples/*.yaml")
	if len(files) == 0 {
		t.Fatal("no examples")
	}
	for _, f := range files {
		if text, err := os.ReadFile(f); err != nil || !bytes.HasPrefix(text, []byte("# ")) {
			t.Errorf("%s: want a header comment saying what it shows (%v)", f, err)
		}
		cfg, err := Load(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if w := cfg.Warnings(); len(w) > 0 {
			t.Errorf("%s: %v", f, w)
		}
	}
}
