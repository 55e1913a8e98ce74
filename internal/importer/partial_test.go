package importer

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
)

// omittedLine is the comment a partial import writes for what it left out.
var omittedLine = regexp.MustCompile(`^ *# sluice import: testdata/partial/[^:]+:[0-9]+: .+`)

// TestPartial converts each file of testdata/partial with Options.Partial: the output, with
// a "# sluice import: FILE:LINE: reason" comment where each service left out stood, matches its
// golden file and validates; the summary lists what was left out. Without Partial the same
// file is refused.
func TestPartial(t *testing.T) {
	entries, err := os.ReadDir(filepath.Join("testdata", "partial"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".golden.yaml") {
			continue
		}
		t.Run(e.Name(), func(t *testing.T) {
			format, _, _ := strings.Cut(e.Name(), "-")
			src := filepath.Join("testdata", "partial", e.Name())
			if _, err := formats[format](src, Options{}); err == nil {
				t.Errorf("converted without --partial")
			}
			res, err := formats[format](src, Options{Partial: true})
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
			comments := 0
			for _, line := range strings.Split(string(out), "\n") {
				if strings.Contains(line, "# sluice import:") {
					comments++
					if !omittedLine.MatchString(line) {
						t.Errorf("comment %q is not # sluice import: FILE:LINE: reason", line)
					}
				}
			}
			if len(res.Omitted) == 0 || comments < len(res.Omitted) {
				t.Errorf("%d left out, %d comments", len(res.Omitted), comments)
			}
			summary := res.Summary()
			for _, o := range res.Omitted {
				if !strings.Contains(summary, fmt.Sprintf("%s:%d", o.File, o.Line)) {
					t.Errorf("summary %q does not name %s:%d", summary, o.File, o.Line)
				}
			}
			t.Log(summary)
		})
	}
}

// TestPartialNothingLeftOut: a partial import of a file that converts whole leaves nothing out
// and prints what the whole import prints.
func TestPartialNothingLeftOut(t *testing.T) {
	for format, convert := range formats {
		for _, src := range corpus(t, format) {
			opts := options(src)
			whole, err := convert(src, opts)
			if err != nil {
				t.Fatal(err)
			}
			opts.Partial = true
			part, err := convert(src, opts)
			if err != nil {
				t.Fatal(err)
			}
			a, _ := whole.YAML()
			b, _ := part.YAML()
			if len(part.Omitted) != 0 || !bytes.Equal(a, b) {
				t.Errorf("%s: --partial left out %d or printed otherwise", src, len(part.Omitted))
			}
		}
	}
}

// TestPartialAllLeftOut: a partial import that converts nothing is refused with every reason.
func TestPartialAllLeftOut(t *testing.T) {
	path := write(t, "k.conf", strings.Replace(vs, "lb_algo rr", "lb_algo dh", 1)+strings.Replace(vs, "lb_algo rr", "lb_kind TUN type gre", 1))
	_, err := Keepalived(path, Options{Partial: true})
	if err == nil || !strings.Contains(err.Error(), "k.conf:2: lb_algo dh refused") || !strings.Contains(err.Error(), "k.conf:7: lb_kind TUN type gre refused") {
		t.Errorf("error %v, want both refusals", err)
	}
}
