package labcli

import (
	"io"
	"strings"
	"testing"
)

// TestLabRefusesBadFlags checks that up, down and status refuse a lab size out of range, naming
// it, before they touch a namespace.
func TestLabRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"status", "--prefix", "sluice-cli-test", "--backends", "0"},
		{"up", "--prefix", "sluice-cli-test", "--backends", "100"},
		{"down", "--prefix", "sluice-cli-test", "--backends", "0"},
	} {
		root := Command()
		root.SetArgs(args)
		root.SetOut(io.Discard)
		if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "backends must be 1..99") {
			t.Errorf("sluice-lab %s: %v, want an error naming the backends", strings.Join(args, " "), err)
		}
	}
}
