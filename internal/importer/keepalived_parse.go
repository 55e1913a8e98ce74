package importer

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// maxIncludeDepth bounds nested include directives (and so include cycles).
const maxIncludeDepth = 8

// token is one word of a keepalived config and where it is.
type token struct {
	text   string
	quoted bool
	file   string
	line   int
}

func (t token) brace(b string) bool { return !t.quoted && t.text == b }

// lexKeepalived reads path into tokens, following include directives: their glob patterns are
// relative to the including file, and a pattern that matches nothing is an error at its line.
func lexKeepalived(path string, depth int) ([]token, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []token
	for i, line := range strings.Split(string(data), "\n") {
		words, err := lexLine(line, path, i+1)
		if err != nil {
			return nil, err
		}
		if len(words) == 0 || words[0].text != "include" || words[0].quoted {
			out = append(out, words...)
			continue
		}
		if len(words) < 2 {
			return nil, &Error{path, i + 1, "include needs a file or a glob pattern"}
		}
		if depth >= maxIncludeDepth {
			return nil, &Error{path, i + 1, fmt.Sprintf("includes nest deeper than %d (an include cycle?)", maxIncludeDepth)}
		}
		for _, w := range words[1:] {
			pattern := w.text
			if !filepath.IsAbs(pattern) {
				pattern = filepath.Join(filepath.Dir(path), pattern)
			}
			files, err := filepath.Glob(pattern)
			if err != nil || len(files) == 0 {
				return nil, &Error{path, i + 1, fmt.Sprintf("include %s matches no file", w.text)}
			}
			sort.Strings(files)
			for _, f := range files {
				included, err := lexKeepalived(f, depth+1)
				if err != nil {
					return nil, err
				}
				out = append(out, included...)
			}
		}
	}
	return out, nil
}

// lexLine splits a line into words: blanks separate them, { and } are words of their own,
// "quoted text" is one word, and # or ! start a comment.
func lexLine(line, file string, n int) ([]token, error) {
	var out []token
	var word strings.Builder
	flush := func() {
		if word.Len() > 0 {
			out = append(out, token{text: word.String(), file: file, line: n})
			word.Reset()
		}
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch c {
		case '#', '!':
			flush()
			return out, nil
		case ' ', '\t', '\r':
			flush()
		case '{', '}':
			flush()
			out = append(out, token{text: string(c), file: file, line: n})
		case '"':
			flush()
			end := strings.IndexByte(line[i+1:], '"')
			if end < 0 {
				return nil, &Error{file, n, "unterminated quote"}
			}
			out = append(out, token{text: line[i+1 : i+1+end], quoted: true, file: file, line: n})
			i += end + 1
		default:
			word.WriteByte(c)
		}
	}
	flush()
	return out, nil
}

// stmt is one keepalived statement: the words of a line and the block that follows them.
type stmt struct {
	words []token
	block []*stmt
}

func (s *stmt) key() string { return s.words[0].text }

// args are the words after the keyword.
func (s *stmt) args() []string {
	out := make([]string, len(s.words)-1)
	for i, w := range s.words[1:] {
		out[i] = w.text
	}
	return out
}

func (s *stmt) file() string { return s.words[0].file }
func (s *stmt) line() int    { return s.words[0].line }

// parseStatements groups tokens into statements: a statement is the words of one line, and a
// { after them opens its block up to the matching }.
func parseStatements(toks []token) ([]*stmt, error) {
	p := &stmtParser{toks: toks}
	return p.block(nil)
}

type stmtParser struct {
	toks []token
	pos  int
}

// block reads statements up to the } that closes open (nil at the top level).
func (p *stmtParser) block(open *token) ([]*stmt, error) {
	var out []*stmt
	for p.pos < len(p.toks) {
		t := p.toks[p.pos]
		switch {
		case t.brace("}"):
			if open == nil {
				return nil, &Error{t.file, t.line, "} closes no block"}
			}
			p.pos++
			return out, nil
		case t.brace("{"):
			return nil, &Error{t.file, t.line, "{ opens a block without a keyword"}
		}
		s := &stmt{}
		for p.pos < len(p.toks) {
			w := p.toks[p.pos]
			if w.brace("{") || w.brace("}") || w.line != t.line || w.file != t.file {
				break
			}
			s.words = append(s.words, w)
			p.pos++
		}
		if p.pos < len(p.toks) && p.toks[p.pos].brace("{") {
			brace := p.toks[p.pos]
			p.pos++
			block, err := p.block(&brace)
			if err != nil {
				return nil, err
			}
			s.block = block
		}
		out = append(out, s)
	}
	if open != nil {
		return nil, &Error{open.file, open.line, "this { is never closed"}
	}
	return out, nil
}
