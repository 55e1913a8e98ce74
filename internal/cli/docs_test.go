package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"

	"github.com/sluicelb/sluice/internal/mdsh"
)

// TestDocsNameRealCommands checks every sluice command README.md and docs/*.md give or mention
// against the command line: the command exists and takes every flag written, with a value of the
// flag's type. The e2e suite (TestDocsRunInTheLab) runs the fenced sh blocks for real.
func TestDocsNameRealCommands(t *testing.T) {
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, doc := range append([]string{"../../README.md"}, docs...) {
		name := strings.TrimPrefix(doc, "../../")
		for _, read := range []func(*os.File) ([]mdsh.Command, error){
			func(f *os.File) ([]mdsh.Command, error) { return mdsh.Blocks(f) },
			func(f *os.File) ([]mdsh.Command, error) { return mdsh.Mentions(f) },
		} {
			f, err := os.Open(doc)
			if err != nil {
				t.Fatal(err)
			}
			cmds, err := read(f)
			f.Close()
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			for _, c := range cmds {
				for _, args := range sluiceInvocations(c.Text) {
					checked++
					if err := parses(args); err != nil {
						t.Errorf("%s:%d: sluice %s: %v", name, c.Line, strings.Join(args, " "), err)
					}
				}
			}
		}
	}
	t.Logf("%d sluice commands checked", checked)
	if checked < 50 {
		t.Errorf("checked only %d sluice commands in the docs: is the extraction broken?", checked)
	}
}

// parses resolves args (without the leading "sluice") to a command and parses its flags.
func parses(args []string) error {
	root, _ := rootCmdWith()
	root.InitDefaultCompletionCmd()
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	return cmd.ParseFlags(rest)
}

// sluiceInvocations returns the arguments of each sluice command in a shell command line: words
// after "sluice" (or a path ending in /sluice) up to a shell operator or a comment.
func sluiceInvocations(line string) [][]string {
	var (
		all     [][]string
		current []string
		in      bool
	)
	for _, w := range shellWords(line) {
		switch {
		case w == "#":
			return appendIf(all, current, in)
		case isOperator(w):
			all, current, in = appendIf(all, current, in), nil, false
		case in:
			current = append(current, w)
		case w == "sluice" || strings.HasSuffix(w, "/sluice"):
			in = true
		}
	}
	return appendIf(all, current, in)
}

func appendIf(all [][]string, args []string, in bool) [][]string {
	if in {
		return append(all, args)
	}
	return all
}

func isOperator(w string) bool {
	switch w {
	case "|", "||", "&&", ";", "&", "do", "done", "then", "...": // "...": any command
		return true
	}
	return strings.HasPrefix(w, ">") || strings.HasPrefix(w, "<") || strings.HasPrefix(w, "2>")
}

// shellWords splits a line into words like a shell would for these purposes: quotes group, ';'
// and '&' end a word, a '#' word starts a comment (returned as "#").
func shellWords(line string) []string {
	var (
		words []string
		word  strings.Builder
		quote rune
		has   bool
	)
	flush := func() {
		if has {
			words = append(words, word.String())
		}
		word.Reset()
		has = false
	}
	for _, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				word.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, has = r, true
		case r == '#' && !has:
			flush()
			words = append(words, "#")
			return words
		case r == ';' || r == '&' && !has:
			flush()
			words = append(words, string(r))
		case unicode.IsSpace(r) || r == '\\':
			flush()
		default:
			word.WriteRune(r)
			has = true
		}
	}
	flush()
	return words
}
