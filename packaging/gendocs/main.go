// Command gendocs writes sluice's man pages, generated from its command line, into a directory:
// go run ./packaging/gendocs DIR (make install runs it).
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra/doc"

	"github.com/sluicelb/sluice/internal/cli"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gendocs MANDIR")
		os.Exit(2)
	}
	root := cli.Command()
	root.DisableAutoGenTag = true // the pages stay the same from build to build
	header := &doc.GenManHeader{Title: "SLUICE", Section: "1", Source: "Sluice " + cli.Version, Manual: "Sluice manual"}
	if err := doc.GenManTree(root, header, os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "gendocs:", err)
		os.Exit(1)
	}
}
