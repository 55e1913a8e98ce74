// Package testutil holds small helpers shared by the tests of several packages: waiting for a
// condition, building a plan from YAML, generating large configs, and a log buffer to read while
// a logger writes it. Tests only.
package testutil

import (
	"testing"
	"time"
)

// Deadline is how long Eventually waits: generous, since tests never assert timings.
const Deadline = 20 * time.Second

// Eventually polls cond every few milliseconds until it holds, failing t after Deadline with
// "timed out waiting for what".
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Deadline)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// EventuallyClosed waits, as Eventually, until c is closed.
func EventuallyClosed(t testing.TB, what string, c <-chan struct{}) {
	t.Helper()
	Eventually(t, what, func() bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	})
}
