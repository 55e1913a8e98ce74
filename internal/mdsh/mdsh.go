// Package mdsh reads the shell commands out of Markdown documents, so that tests can run the
// commands the docs give (fenced sh blocks) and check the ones they mention (inline code).
package mdsh

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// Command is one shell command of a document.
type Command struct {
	// Line is the 1-based line of the document the command starts on.
	Line int
	// Text is the command as a shell reads it: continuation lines joined, a quoted string that
	// spans lines kept whole, a trailing comment left in.
	Text string
}

func (c Command) String() string { return fmt.Sprintf("line %d: %s", c.Line, c.Text) }

// Blocks returns the commands of the document's fenced code blocks of language sh (```sh), in
// order; comment-only and blank lines are left out.
func Blocks(r io.Reader) ([]Command, error) {
	var (
		cmds    []Command
		inBlock bool
		pending *Command
	)
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		fence := strings.HasPrefix(strings.TrimSpace(line), "```")
		switch {
		case fence && !inBlock:
			inBlock = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "```")) == "sh"
			continue
		case fence && inBlock:
			if pending != nil {
				return nil, fmt.Errorf("line %d: the block ends inside a command (line %d)", n, pending.Line)
			}
			inBlock = false
			continue
		case !inBlock:
			continue
		}
		if pending == nil {
			if t := strings.TrimSpace(line); t == "" || strings.HasPrefix(t, "#") {
				continue
			}
			pending = &Command{Line: n}
			pending.Text = line
		} else {
			pending.Text += "\n" + line
		}
		if complete(pending.Text) {
			pending.Text = strings.TrimSpace(pending.Text)
			cmds = append(cmds, *pending)
			pending = nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if inBlock {
		return nil, fmt.Errorf("a ```sh block is not closed")
	}
	return cmds, nil
}

// complete tells whether text is a whole command: no quote left open, no trailing backslash. A
// '#' that starts a word outside quotes comments out the rest of its line.
func complete(text string) bool {
	var quote rune
	escaped, comment := false, false
	prev := ' '
	for _, r := range text {
		switch {
		case comment:
			comment = r != '\n'
		case escaped:
			escaped = false
		case r == '\\' && quote != '\'':
			escaped = true
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (prev == ' ' || prev == '\t' || prev == '\n'):
			comment = true
		}
		prev = r
	}
	return quote == 0 && !escaped
}

// inlineSluice matches inline code that starts with a sluice or sluice-lab command.
var inlineSluice = regexp.MustCompile("`(sluice(?:-lab)? [^`]+)`")

// Mentions returns the sluice and sluice-lab commands the document names in inline code
// (`sluice list -o wide`), outside fenced blocks, with their line.
func Mentions(r io.Reader) ([]Command, error) {
	var cmds []Command
	inBlock := false
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inBlock = !inBlock
			continue
		}
		if inBlock {
			continue
		}
		for _, m := range inlineSluice.FindAllStringSubmatch(line, -1) {
			cmds = append(cmds, Command{Line: n, Text: m[1]})
		}
	}
	return cmds, sc.Err()
}
