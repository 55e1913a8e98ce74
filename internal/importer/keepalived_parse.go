package importer

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"unsafe"

	"github.com/sluicelb/sluice/internal/boundedread"
)

// token is one word of a keepalived config and where it is.
type token struct {
	text   string
	quoted bool
	file   string
	line   int
}

func (t token) brace(b string) bool { return !t.quoted && t.text == b }

// kaLexer reads a keepalived config and the files it includes into words, within the limits
// of limits.go.
type kaLexer struct {
	words []token
	files int   // files included so far
	bytes int64 // bytes read so far, of every file
	depth int   // blocks open
}

// lexKeepalived reads path into tokens, following include directives: their glob patterns are
// relative to the including file, and a pattern that matches nothing is an error at its line.
func lexKeepalived(path string) ([]token, error) {
	l := &kaLexer{}
	if err := l.file(path, nil, 0); err != nil {
		return nil, err
	}
	return l.words, nil
}

// file lexes one file, included by the directive at from (nil for the config itself) at
// include depth depth.
func (l *kaLexer) file(path string, from *token, depth int) error {
	data, err := l.read(path)
	if err != nil {
		if from != nil {
			return &Error{from.file, from.line, "include " + err.Error()}
		}
		return err
	}
	// data is not changed: its words are substrings of it.
	text := unsafe.String(unsafe.SliceData(data), len(data))
	for n := 1; text != ""; n++ {
		var line string
		line, text, _ = strings.Cut(text, "\n")
		if err := l.line(line, path, n, depth); err != nil {
			return err
		}
	}
	return nil
}

// read reads a file, within boundedread.ImportBytes and what is left of MaxIncludeBytes: a
// file too large for the latter is refused before it is read.
func (l *kaLexer) read(path string) ([]byte, error) {
	f, err := boundedread.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tooMany := fmt.Errorf("%s: the config and its includes take more than %s, the most an import reads: import the config in parts", path, boundedread.Size(MaxIncludeBytes))
	if info, err := f.Stat(); err == nil && l.bytes+info.Size() > MaxIncludeBytes {
		return nil, tooMany
	}
	data, err := boundedread.Reader(f, path, boundedread.ImportBytes)
	if err != nil {
		return nil, err
	}
	if l.bytes += int64(len(data)); l.bytes > MaxIncludeBytes {
		return nil, tooMany
	}
	return data, nil
}

// line lexes line n of file, following an include directive.
func (l *kaLexer) line(line, file string, n, depth int) error {
	switch {
	case len(line) > MaxLineBytes:
		return &Error{file, n, fmt.Sprintf("a line longer than %s: not a keepalived config", boundedread.Size(MaxLineBytes))}
	case strings.IndexByte(line, 0) >= 0:
		return &Error{file, n, "a NUL byte: not a text file, not a keepalived config"}
	}
	start := len(l.words)
	words, err := lexLine(l.words, line, file, n)
	if err != nil {
		return err
	}
	l.words = words
	if len(l.words) > MaxWords {
		return &Error{file, n, fmt.Sprintf("more than %d words in the config and its includes, the most an import reads: import the config in parts", MaxWords)}
	}
	if first := l.words[start:]; len(first) > 0 && first[0].text == "include" && !first[0].quoted {
		l.words = l.words[:start]
		return l.include(first, depth)
	}
	for _, w := range l.words[start:] {
		switch {
		case w.brace("{"):
			if l.depth++; l.depth > MaxNesting {
				return &Error{file, n, fmt.Sprintf("blocks nest deeper than %d ({ within {): not a keepalived config", MaxNesting)}
			}
		case w.brace("}") && l.depth > 0:
			l.depth--
		}
	}
	return nil
}

// include reads the files an include directive names, in the order of its patterns and, per
// pattern, of their names.
func (l *kaLexer) include(words []token, depth int) error {
	at := words[0]
	if len(words) < 2 {
		return &Error{at.file, at.line, "include needs a file or a glob pattern"}
	}
	if depth >= MaxIncludeDepth {
		return &Error{at.file, at.line, fmt.Sprintf("includes nest deeper than %d (an include cycle?)", MaxIncludeDepth)}
	}
	patterns := make([]string, len(words)-1)
	for i, w := range words[1:] {
		patterns[i] = w.text
	}
	for _, pattern := range patterns {
		shownPattern := shown(pattern)
		if !filepath.IsAbs(pattern) {
			pattern = filepath.Join(filepath.Dir(at.file), pattern)
		}
		files, err := filepath.Glob(pattern)
		if err != nil || len(files) == 0 {
			return &Error{at.file, at.line, fmt.Sprintf("include %s matches no file", shownPattern)}
		}
		if l.files += len(files); l.files > MaxIncludes {
			return &Error{at.file, at.line, fmt.Sprintf("include %s: more than %d included files in all, the most an import reads: import the config in parts", shownPattern, MaxIncludes)}
		}
		sort.Strings(files)
		for _, f := range files {
			if err := l.file(f, &at, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// lexLine appends the words of a line to out: blanks separate them, { and } are words of their
// own, "quoted text" is one word, and # or ! start a comment.
func lexLine(out []token, line, file string, n int) ([]token, error) {
	start := -1
	flush := func(end int) {
		if start >= 0 {
			out = append(out, token{text: line[start:end], file: file, line: n})
			start = -1
		}
	}
	for i := 0; i < len(line); i++ {
		switch c := line[i]; c {
		case '#', '!':
			flush(i)
			return out, nil
		case ' ', '\t', '\r':
			flush(i)
		case '{', '}':
			flush(i)
			out = append(out, token{text: line[i : i+1], file: file, line: n})
		case '"':
			flush(i)
			end := strings.IndexByte(line[i+1:], '"')
			if end < 0 {
				return nil, &Error{file, n, "unterminated quote"}
			}
			out = append(out, token{text: line[i+1 : i+1+end], quoted: true, file: file, line: n})
			i += end + 1
		default:
			if start < 0 {
				start = i
			}
		}
	}
	flush(len(line))
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
		first := p.pos
		for p.pos < len(p.toks) {
			w := p.toks[p.pos]
			if w.brace("{") || w.brace("}") || w.line != t.line || w.file != t.file {
				break
			}
			p.pos++
		}
		s.words = p.toks[first:p.pos:p.pos]
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
