package cli

import (
	"path/filepath"
	"testing"

	"github.com/sluicelb/sluice/internal/mdsh"
)

// TestDocsNameRealCommands checks every sluice command README.md and docs/*.md give or mention
// against the command line: the command exists and takes every flag written, with a value of the
// flag's type. internal/labcli checks the sluice-lab ones; the e2e suite (TestDocsRunInTheLab)
// runs the fenced sh blocks for real.
func TestDocsNameRealCommands(t *testing.T) {
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	checked, errs := mdsh.CheckCommands(append([]string{"../../README.md"}, docs...), "sluice", rootCmd)
	for _, err := range errs {
		t.Error(err)
	}
	t.Logf("%d sluice commands checked", checked)
	if checked < 50 {
		t.Errorf("checked only %d sluice commands in the docs: is the extraction broken?", checked)
	}
}
