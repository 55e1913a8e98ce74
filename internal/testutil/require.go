package testutil

import (
	"fmt"
	"os"
	"testing"
)

// StrictEnv names the environment variable that CI sets to 1 (.ci/run): a test missing root or a
// tool then fails rather than skips, so a run cannot pass with the datapaths untested.
const StrictEnv = "SLUICE_TEST_STRICT"

// Missing reports a missing prerequisite (root, a tool): it skips t, or fails it under
// SLUICE_TEST_STRICT=1. Skips by design (-short, a soak run on request) call t.Skip instead.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	reason := fmt.Sprintf(format, args...)
	if os.Getenv(StrictEnv) == "1" {
		t.Fatalf("%s (%s=1: a missing prerequisite fails)", reason, StrictEnv)
	}
	t.Skip(reason)
}
