package e2e

import (
	"bytes"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
)

// Bounds of the digest: a run whose every test fails still ends with a screenful.
const (
	digestMaxLines        = 80  // lines kept in all
	digestMaxContinuation = 2   // lines kept after a message's first line
	digestMaxWidth        = 240 // characters kept of a line
)

var (
	// failLine is go test's line for a failed test or subtest.
	failLine = regexp.MustCompile(`^\s*--- FAIL: `)
	// messageLine is the first line of a t.Log/t.Error message: "    file_test.go:12: text".
	messageLine = regexp.MustCompile(`^(\s*)\w+\.go:\d+: `)
)

// failureDigest keeps, from the test process's output, what says why tests failed: the
// "--- FAIL" lines and the messages printed under them (first lines and a few continuation lines,
// the daemon logs' slog records left out). A long run prints megabytes of logs of failed tests;
// the supervisor prints the digest at the end, where a CI log's tail shows it.
type failureDigest struct {
	mu      sync.Mutex
	partial []byte   // an unterminated last line
	lines   []string // the digest so far
	dropped int      // lines left out by digestMaxLines
	inFail  bool     // inside the output of a failed test
	indent  int      // the indentation of the current message's first line
	cont    int      // continuation lines kept of the current message
}

var _ io.Writer = (*failureDigest)(nil)

func (d *failureDigest) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.partial = append(d.partial, p...)
	data := d.partial
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		d.line(string(data[:i]))
		data = data[i+1:]
	}
	d.partial = append([]byte(nil), data...)
	return len(p), nil
}

func (d *failureDigest) line(l string) {
	switch {
	case failLine.MatchString(l):
		d.inFail, d.cont, d.indent = true, digestMaxContinuation, -1
		d.keep(l)
	case strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- ") || l == "FAIL" || l == "PASS":
		d.inFail = false
	case !d.inFail:
	case messageLine.MatchString(l):
		d.indent = len(messageLine.FindStringSubmatch(l)[1])
		d.cont = 0
		d.keep(l)
	case d.indent >= 0 && d.cont < digestMaxContinuation && indentOf(l) > d.indent &&
		!strings.HasPrefix(strings.TrimSpace(l), "time="):
		d.cont++
		d.keep(l)
	}
}

func indentOf(l string) int { return len(l) - len(strings.TrimLeft(l, " \t")) }

func (d *failureDigest) keep(l string) {
	if len(d.lines) >= digestMaxLines {
		d.dropped++
		return
	}
	if len(l) > digestMaxWidth {
		l = l[:digestMaxWidth] + " [...]"
	}
	d.lines = append(d.lines, l)
}

// String is the digest, empty when no test failed.
func (d *failureDigest) String() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.lines) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("e2e: why tests failed (the \"--- FAIL\" lines and the messages under them; logs above):\n")
	for _, l := range d.lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	if d.dropped > 0 {
		fmt.Fprintf(&b, "e2e: ... and %d more lines\n", d.dropped)
	}
	return b.String()
}
