package cli

import (
	"testing"

	"github.com/sluicelb/sluice/internal/mdsh"
)

// TestDocsNameRealCommands checks every sluice command README.md and docs/*.md give or mention
// against the command line: the command exists and takes every flag written, with a value of the
// flag's type. internal/labcli checks the sluice-lab ones; the e2e suite (TestDocsRunInTheLab)
// runs the fenced sh blocks for real.
func TestDocsNameRealCommands(t *testing.T) {
	mdsh.CheckDocs(t, "../..", "sluice", rootCmd, 50)
}
