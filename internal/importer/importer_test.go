package importer

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata")

// converter is an importer.
type converter = func(string, Options) (*Result, error)

// formats are the importers by the corpus directory (and bad file prefix) they read.
var formats = map[string]converter{
	"keepalived": Keepalived,
	"nftlb":      Nftlb,
	"ipvsadm":    Ipvsadm,
}

// corpus lists the source files of a format's corpus: every file but the goldens.
func corpus(t *testing.T, format string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join("testdata", format))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() && !strings.HasSuffix(e.Name(), ".golden.yaml") {
			out = append(out, filepath.Join("testdata", format, e.Name()))
		}
	}
	if len(out) == 0 {
		t.Fatalf("no corpus in testdata/%s", format)
	}
	return out
}

// golden compares got with the golden file, or rewrites it with -update.
func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// TestGolden converts every corpus file and compares the YAML with its golden file, which
// sluice validate must take unchanged.
func TestGolden(t *testing.T) {
	for format, convert := range formats {
		for _, src := range corpus(t, format) {
			t.Run(filepath.Base(src), func(t *testing.T) {
				res, err := convert(src, options(src))
				if err != nil {
					t.Fatal(err)
				}
				out, err := res.YAML()
				if err != nil {
					t.Fatal(err)
				}
				golden(t, src+".golden.yaml", out)
				if _, err := config.Load(src + ".golden.yaml"); err != nil {
					t.Errorf("the golden output does not load:\n%v", err)
				}
			})
		}
	}
}

// options are what a corpus file converts with: --fwmark-rules when fwmark/NAME.rules (NAME
// the file's name without its extension) is beside it.
func options(src string) Options {
	name := strings.TrimSuffix(filepath.Base(src), filepath.Ext(src))
	rules := filepath.Join(filepath.Dir(src), "fwmark", name+".rules")
	if _, err := os.Stat(rules); err == nil {
		return Options{FwmarkRules: rules}
	}
	return Options{}
}

// errorLine is how every refusal starts: the file and the line.
var errorLine = regexp.MustCompile(`^testdata/bad/[^:]+:[0-9]+: `)

// TestRefusals converts every file of testdata/bad: each must fail with FILE:LINE: and the
// reason kept in its .err golden file.
func TestRefusals(t *testing.T) {
	entries, err := os.ReadDir(filepath.Join("testdata", "bad"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() || strings.HasSuffix(e.Name(), ".err") {
			continue
		}
		t.Run(e.Name(), func(t *testing.T) {
			format, _, _ := strings.Cut(e.Name(), "-")
			convert := formats[format]
			if convert == nil {
				t.Fatalf("%s: no format %q", e.Name(), format)
			}
			src := filepath.Join("testdata", "bad", e.Name())
			res, err := convert(src, options(src))
			if err == nil {
				out, _ := res.YAML()
				t.Fatalf("converted:\n%s", out)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !errorLine.MatchString(line) {
					t.Errorf("%q does not start with FILE:LINE:", line)
				}
			}
			golden(t, strings.TrimSuffix(src, filepath.Ext(src))+".err", []byte(goWordingOmitted(err.Error())+"\n"))
		})
	}
}

// goWordingOmitted leaves out what encoding/json says of a syntax error after "not JSON: ", which
// differs between Go releases (the same text is "invalid character '}' looking for beginning of
// object key string" in 1.26 and "invalid character ',' looking for beginning of value" in 1.27):
// the file, the line and Sluice's own words are what the refusals' golden files hold.
func goWordingOmitted(refusal string) string {
	const marker = "not JSON: "
	lines := strings.Split(refusal, "\n")
	for i, line := range lines {
		before, after, found := strings.Cut(line, marker)
		if found && !slices.Contains([]string{"the file ends inside a value", "more after the end of the top value"}, after) {
			lines[i] = before + marker + "(encoding/json's words)"
		}
	}
	return strings.Join(lines, "\n")
}

func TestNames(t *testing.T) {
	n := namer{}
	for _, tc := range []struct {
		vip   string
		ports string
		want  string
	}{
		{"10.0.0.1", "443", "tcp-10-0-0-1-443"},
		{"10.0.0.1", "443", "tcp-10-0-0-1-443-2"},
		{"2001:db8:aaaa:bbbb:cccc:dddd:eeee:1", "443", "tcp-aa-bbbb-cccc-dddd-eeee-1-443"},
		{"2001:db8:aaaa:bbbb:cccc:dddd:eeee:1", "443", "tcp-aa-bbbb-cccc-dddd-eeee-1-4-2"},
		{"10.0.0.1", "80,443", "tcp-10-0-0-1-80_443"},
		{"10.0.0.1", "80,443,8000-8010", "tcp-10-0-0-1-80_and2"},
		{"2001:db8:aaaa:bbbb:cccc:dddd:eeee:1", "60000-60010,65535", "tcp-dddd-eeee-1-60000-60010_and1"},
	} {
		ports, err := config.ParsePortList(tc.ports)
		if err != nil {
			t.Fatal(err)
		}
		got := n.name(config.ProtocolTCP, config.IPOf(tc.vip), ports)
		if got != tc.want || len(got) > 32 {
			t.Errorf("name of %s %s = %q, want %q", tc.vip, tc.ports, got, tc.want)
		}
	}
}

func TestSplitCommand(t *testing.T) {
	for _, tc := range []struct {
		line string
		want string // argv joined by |, or "error"
	}{
		{`/bin/notify web up`, "/bin/notify|web|up"},
		{`/bin/notify 'quorum lost' "a b" c\ d`, "/bin/notify|quorum lost|a b|c d"},
		{`/bin/notify "$HOST"`, "error"},
		{`/bin/a | /bin/b`, "error"},
		{`/bin/a > /tmp/x`, "error"},
		{`/bin/a 'open`, "error"},
		{``, "error"},
	} {
		argv, err := splitCommand(tc.line)
		got := strings.Join(argv, "|")
		if err != nil {
			got = "error"
		}
		if got != tc.want {
			t.Errorf("splitCommand(%q) = %q (%v), want %q", tc.line, got, err, tc.want)
		}
	}
}

func TestMaskPrefix(t *testing.T) {
	for text, want := range map[string]int{"255.255.255.0": 24, "255.255.255.255": 32, "255.255.0.0": 16, "64": 64, "255.0.255.0": 0, "0.0.0.0": 0, "200": 0, "x": 0} {
		got, err := maskPrefix(text)
		if (err != nil) != (want == 0) || got != want {
			t.Errorf("maskPrefix(%q) = %d, %v; want %d", text, got, err, want)
		}
	}
}

// TestCorpusSize: each of keepalived and nftlb has at least 30 configs with an expected output
// or refusal (converted, refused or partly converted).
func TestCorpusSize(t *testing.T) {
	for _, format := range []string{"keepalived", "nftlb"} {
		n := len(corpus(t, format))
		for _, dir := range []string{"bad", "partial"} {
			entries, err := os.ReadDir(filepath.Join("testdata", dir))
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), format+"-") && !strings.HasSuffix(e.Name(), ".err") && !strings.HasSuffix(e.Name(), ".golden.yaml") && !e.IsDir() {
					n++
				}
			}
		}
		if n < 30 {
			t.Errorf("%s: %d configs in the corpus, want at least 30", format, n)
		}
		t.Logf("%s: %d configs", format, n)
	}
}

// TestCommentEscapesWhatYAMLCannotWrite: a note citing input with bytes that are not UTF-8 or
// control characters is written escaped (the YAML emitter panics on the bytes), the rest as is.
func TestCommentEscapesWhatYAMLCannotWrite(t *testing.T) {
	got := comment([]string{"-b Uh\x80port: dropped", "a\tb\nc", `"quoted" ünïcode`})
	want := "# -b Uh\\x80port: dropped\n# a\\tb\\nc\n# \"quoted\" ünïcode"
	if got != want {
		t.Errorf("comment:\n%s\nwant:\n%s", got, want)
	}
}
