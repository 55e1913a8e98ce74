package cli

import (
	"fmt"
	"io"
	"runtime"

	"github.com/spf13/cobra"
)

// Commit and BuildDate are stamped by the build beside Version (make build: -ldflags -X); a plain
// go build leaves them empty.
var Commit, BuildDate string

// buildInfo is what `sluice version` reports.
type buildInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit,omitempty"`
	BuildDate string `json:"build_date,omitempty"`
	Go        string `json:"go"`
	Platform  string `json:"platform"`
}

func currentBuild() buildInfo {
	return buildInfo{Version: Version, Commit: Commit, BuildDate: BuildDate, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
}

// VersionLine is the one line of --version of the command name built with this package (sluice-lab).
func VersionLine(name string) string { return currentBuild().line(name) }

// String is the one line of `sluice --version`.
func (b buildInfo) String() string { return b.line("sluice") }

// line is the one line of `name --version`.
func (b buildInfo) line(name string) string {
	s := name + " " + b.Version
	if b.Commit != "" {
		s += " commit " + b.Commit
	}
	if b.BuildDate != "" {
		s += " built " + b.BuildDate
	}
	return s + " " + b.Go + " " + b.Platform
}

func versionCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and build date of this sluice",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b := currentBuild()
			return emit(cmd.OutOrStdout(), output, b, func(w io.Writer) error {
				_, err := fmt.Fprintln(w, b)
				return err
			})
		},
	}
	outputFlag(cmd, &output)
	return cmd
}
