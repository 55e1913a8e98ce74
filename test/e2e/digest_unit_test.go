package e2e

import (
	"fmt"
	"strings"
	"testing"
)

// TestFailureDigestKeepsWhyTestsFailed feeds go test's output of a failed test with a daemon log,
// in pieces that split lines, and a passed one: the digest holds the FAIL lines and messages,
// not the slog records nor the passing test's lines.
func TestFailureDigestKeepsWhyTestsFailed(t *testing.T) {
	out := strings.Join([]string{
		"--- FAIL: TestDaemon (51.36s)",
		"    --- FAIL: TestDaemon/drain (3.20s)",
		"        lab_test.go:49: sluice flush: exit status 1",
		"            stdout: ",
		"            stderr: network namespace slt1-lb net:[4026533676] is being written by pid 7",
		"            third continuation line",
		"        daemon_test.go:72: daemon log:",
		"            time=2026-11-24T14:49:22.885Z level=INFO msg=event type=backend_up",
		"--- PASS: TestQuorum (1.15s)",
		"    quorum_test.go:80: a passing test's log",
		"FAIL",
		"",
	}, "\n")
	d := &failureDigest{}
	for len(out) > 0 { // writes of 7 bytes: lines arrive in pieces
		n := min(7, len(out))
		if _, err := d.Write([]byte(out[:n])); err != nil {
			t.Fatal(err)
		}
		out = out[n:]
	}
	got := d.String()
	for _, want := range []string{"--- FAIL: TestDaemon (51.36s)", "--- FAIL: TestDaemon/drain", "lab_test.go:49: sluice flush",
		"stderr: network namespace slt1-lb", "daemon_test.go:72: daemon log:"} {
		if !strings.Contains(got, want) {
			t.Errorf("digest lacks %q:\n%s", want, got)
		}
	}
	for _, unwanted := range []string{"third continuation", "time=", "quorum_test.go", "TestQuorum"} {
		if strings.Contains(got, unwanted) {
			t.Errorf("digest holds %q:\n%s", unwanted, got)
		}
	}
}

// TestFailureDigestIsBounded: thousands of failures make a digest of digestMaxLines lines and a
// count of the rest; a run without failures makes none.
func TestFailureDigestIsBounded(t *testing.T) {
	d := &failureDigest{}
	if d.String() != "" {
		t.Fatalf("digest of no output: %q", d.String())
	}
	for i := range 1000 {
		fmt.Fprintf(d, "--- FAIL: TestX/%d (0.00s)\n    x_test.go:1: %s\n", i, strings.Repeat("y", 1000))
	}
	lines := strings.Split(strings.TrimSuffix(d.String(), "\n"), "\n")
	if len(lines) != digestMaxLines+2 || !strings.Contains(lines[len(lines)-1], fmt.Sprintf("%d more lines", 2000-digestMaxLines)) {
		t.Errorf("digest of 2000 lines has %d lines, ending %q", len(lines), lines[len(lines)-1])
	}
	for _, l := range lines {
		if len(l) > digestMaxWidth+len(" [...]") {
			t.Fatalf("a line of %d characters", len(l))
		}
	}
}
