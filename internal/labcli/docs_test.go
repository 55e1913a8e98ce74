package labcli

import (
	"path/filepath"
	"testing"

	"github.com/sluicelb/sluice/internal/mdsh"
)

// TestDocsNameRealCommands checks every sluice-lab command README.md and docs/*.md give or
// mention against the command line: the command exists and takes every flag written, with a value
// of the flag's type.
func TestDocsNameRealCommands(t *testing.T) {
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	checked, errs := mdsh.CheckCommands(append([]string{"../../README.md"}, docs...), "sluice-lab", Command)
	for _, err := range errs {
		t.Error(err)
	}
	t.Logf("%d sluice-lab commands checked", checked)
	if checked < 20 {
		t.Errorf("checked only %d sluice-lab commands in the docs: is the extraction broken?", checked)
	}
}
