package mdsh

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"

	"github.com/spf13/cobra"
)

// CheckDocs checks every run of the command name in the repository's README.md and docs/*.md
// (below root) as CheckCommands does, failing t for each bad one, and for fewer than least runs
// (the extraction broken).
func CheckDocs(t testing.TB, root, name string, newRoot func() *cobra.Command, least int) {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs/*.md"))
	if err != nil {
		t.Fatal(err)
	}
	checked, errs := CheckCommands(append([]string{filepath.Join(root, "README.md")}, docs...), name, newRoot)
	for _, err := range errs {
		t.Error(err)
	}
	t.Logf("%d %s commands checked", checked, name)
	if checked < least {
		t.Errorf("checked only %d %s commands in the docs: is the extraction broken?", checked, name)
	}
}

// CheckCommands checks every run of the command name (the word, or a path ending in /name) that
// the documents give in sh blocks or mention in inline code against its command line, a fresh one
// from newRoot each time: the subcommand exists and takes every flag written, with a value of the
// flag's type. It returns how many runs it checked and an error for each bad one, naming the
// document and line.
func CheckCommands(docs []string, name string, newRoot func() *cobra.Command) (checked int, errs []error) {
	for _, doc := range docs {
		cmds, err := documentCommands(doc)
		if err != nil {
			return checked, append(errs, err)
		}
		for _, c := range cmds {
			for _, args := range Invocations(c.Text, name) {
				checked++
				if err := parses(newRoot(), args); err != nil {
					errs = append(errs, fmt.Errorf("%s:%d: %s %s: %w", doc, c.Line, name, strings.Join(args, " "), err))
				}
			}
		}
	}
	return checked, errs
}

// documentCommands are the commands of the document's sh blocks and its inline mentions.
func documentCommands(doc string) ([]Command, error) {
	var all []Command
	for _, read := range []func(*os.File) ([]Command, error){
		func(f *os.File) ([]Command, error) { return Blocks(f) },
		func(f *os.File) ([]Command, error) { return Mentions(f) },
	} {
		f, err := os.Open(doc)
		if err != nil {
			return nil, err
		}
		cmds, err := read(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", doc, err)
		}
		all = append(all, cmds...)
	}
	return all, nil
}

// parses resolves args (without the command's name) to a subcommand of root and parses its flags.
func parses(root *cobra.Command, args []string) error {
	root.InitDefaultCompletionCmd()
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	return cmd.ParseFlags(rest)
}

// Invocations returns the arguments of each run of the command name in a shell command line:
// the words after name (or a path ending in /name) up to a shell operator or a comment.
func Invocations(line, name string) [][]string {
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
		case w == name || strings.HasSuffix(w, "/"+name):
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
