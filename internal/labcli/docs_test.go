package labcli

import (
	"testing"

	"github.com/sluicelb/sluice/internal/mdsh"
)

// TestDocsNameRealCommands checks every sluice-lab command README.md and docs/*.md give or
// mention against the command line: the command exists and takes every flag written, with a value
// of the flag's type.
func TestDocsNameRealCommands(t *testing.T) {
	mdsh.CheckDocs(t, "../..", "sluice-lab", Command, 20)
}
