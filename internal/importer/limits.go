package importer

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"github.com/sluicelb/sluice/internal/boundedread"
)

// Limits on what one import reads and writes, documented in docs/security.md. Every file is
// read with boundedread (regular files only, at most boundedread.ImportBytes each).
const (
	// MaxIncludeBytes bounds the bytes of a keepalived config and all the files it includes.
	MaxIncludeBytes = 64 << 20
	// MaxIncludes bounds the files a keepalived config includes, in all.
	MaxIncludes = 256
	// MaxIncludeDepth bounds include directives within included files (and so include cycles).
	MaxIncludeDepth = 8
	// MaxNesting bounds { blocks within blocks (keepalived's deepest is 4: virtual_server,
	// real_server, HTTP_GET, url).
	MaxNesting = 64
	// MaxLineBytes bounds one line of a keepalived config or an ipvsadm save file.
	MaxLineBytes = 64 << 10
	// MaxWords bounds the words of a keepalived config and its includes: 131,072 real servers
	// with an HTTP check take about 3.3 million.
	MaxWords = 1 << 22
	// MaxGroupAddresses bounds the addresses virtual_server_group ranges expand to, over
	// every virtual_server that names a group (the ebpf datapath holds 65,536 VIP ports).
	MaxGroupAddresses = 65536
	// MaxServices bounds the services of one import: the ebpf datapath holds 16,384.
	MaxServices = 16384
	// MaxBackends bounds the backends and sorry servers of all services of one import: the
	// ebpf datapath holds 131,072.
	MaxBackends = 131072
	// MaxOutputBytes bounds the YAML an import prints: what Sluice reads from a config file.
	MaxOutputBytes = boundedread.ConfigBytes
	// maxShownErrors bounds the refusals one import reports; the rest are counted.
	maxShownErrors = 50
	// maxShownWord is the longest word of a source an error or a note quotes.
	maxShownWord = 48
)

// pos is a place in a source file.
type pos struct {
	file string
	line int
}

// problems gathers the refusals of one conversion, so that one run reports them all, up to
// maxShownErrors: the others are counted, not kept.
type problems struct {
	list []error
	more int
	// firstMore is where the first refusal not shown is.
	firstMore pos
}

func (p *problems) add(file string, line int, format string, args ...any) {
	if len(p.list) >= maxShownErrors {
		if p.more == 0 {
			p.firstMore = pos{file, line}
		}
		p.more++
		return
	}
	for i, a := range args {
		if text, ok := a.(string); ok && !plainArg(text) {
			args[i] = fmt.Sprintf("(%d bytes, not shown)", len(text))
		}
	}
	p.list = append(p.list, &Error{File: file, Line: line, Msg: fmt.Sprintf(format, args...)})
}

// maxErrorArg is the longest text an error takes as it is: a word of a source or a reason.
const maxErrorArg = 200

// plainArg tells whether an error may show text as it is: not too long, without control
// characters, so that no error reproduces a file's content.
func plainArg(text string) bool {
	return len(text) <= maxErrorArg && !strings.ContainsFunc(text, unicode.IsControl)
}

// count is the number of refusals so far.
func (p *problems) count() int { return len(p.list) + p.more }

// truncate forgets the refusals after the first n.
func (p *problems) truncate(n int) {
	if n < len(p.list) {
		p.list, p.more = p.list[:n], 0
	} else if extra := n - len(p.list); extra < p.more {
		p.more = extra
	}
}

func (p *problems) err() error {
	if p.more == 0 {
		return errors.Join(p.list...)
	}
	more := &Error{File: p.firstMore.file, Line: p.firstMore.line,
		Msg: fmt.Sprintf("and %d more refusals from here on (the first %d are shown)", p.more, maxShownErrors)}
	return errors.Join(append(p.list, more)...)
}

// shown quotes a word of a source for an error: a short printable word in quotes, anything
// else by its length only, so that no error reproduces a file's content.
func shown(word string) string {
	if printableWord(word) {
		return strconv.Quote(word)
	}
	return fmt.Sprintf("(a word of %d bytes, not shown)", len(word))
}

// plain is a word of a source for a note of the output: itself when short and printable, else
// its length only.
func plain(word string) string {
	if printableWord(word) {
		return word
	}
	return fmt.Sprintf("(%d bytes, not shown)", len(word))
}

// printableWord tells whether a word is short and printable ASCII.
func printableWord(word string) bool {
	return len(word) <= maxShownWord && !strings.ContainsFunc(word, func(r rune) bool { return r < ' ' || r > '~' })
}

// output counts what an import writes, refusing more than Sluice's datapaths hold.
type output struct {
	services, backends int
}

// take counts services and backends (with sorry servers) made from the source at where.
func (o *output) take(where pos, services, backends int) error {
	o.services += services
	o.backends += backends
	switch {
	case o.services > MaxServices:
		return &Error{where.file, where.line, fmt.Sprintf("more than %d services, the most Sluice's datapaths hold: import the config in parts (split the file) and keep each part under the limit", MaxServices)}
	case o.backends > MaxBackends:
		return &Error{where.file, where.line, fmt.Sprintf("more than %d backends and sorry servers in all, the most Sluice's datapaths hold: import the config in parts (split the file) and keep each part under the limit", MaxBackends)}
	}
	return nil
}
