package importer

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/sluicelb/sluice/internal/config"
)

// Options are how an import converts.
type Options struct {
	// Partial converts every service it can and leaves out, as comments, what it cannot;
	// without it one refusal refuses the whole input.
	Partial bool
	// FwmarkRules is the iptables-save or nft list ruleset output that sets the marks of
	// fwmark services (keepalived, ipvsadm), "" for none: they are refused then.
	FwmarkRules string
}

// maxOmissionReasons bounds the reasons an omission keeps; the others are counted.
const maxOmissionReasons = 8

// Omission is a source construct a partial import left out, at its line, and why.
type Omission struct {
	File    string
	Line    int
	Reasons []error
	// More counts the reasons not kept.
	More int
	// before is the index of the service it stood before in Result.Services.
	before int
}

// Lines are the omission's comment lines: "sluice import: FILE:LINE: reason".
func (o *Omission) Lines() []string {
	var out []string
	for _, r := range o.Reasons {
		out = append(out, "sluice import: "+oneLine(r.Error()))
	}
	if o.More > 0 {
		out = append(out, fmt.Sprintf("sluice import: %s:%d: and %d more refusals", o.File, o.Line, o.More))
	}
	return out
}

// oneLine is text with its control characters as blanks, for a comment line.
func oneLine(text string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, text)
}

// since removes the refusals after the first n and returns them, with the count of those not
// kept.
func (p *problems) since(n int) ([]error, int) {
	if n < len(p.list) {
		errs, more := slices.Clone(p.list[n:]), p.more
		p.list, p.more = p.list[:n], 0
		return errs, more
	}
	more := p.more - (n - len(p.list))
	p.more -= more
	return nil, more
}

// leaveOut records the source construct at where as left out, standing after the services
// converted so far, with the refusals errs holds after its first n; the error is the limit
// on omissions, which ends the conversion.
func (r *Result) leaveOut(errs *problems, n int, where pos) error {
	reasons, more := errs.since(n)
	return r.omit(where, reasons, more, len(r.Services))
}

// omit adds an omission standing before service index before.
func (r *Result) omit(where pos, reasons []error, more, before int) error {
	if len(r.Omitted) >= MaxServices {
		return &Error{where.file, where.line, fmt.Sprintf("more than %d things left out: this is not a config an import converts in part", MaxServices)}
	}
	if len(reasons) > maxOmissionReasons {
		more += len(reasons) - maxOmissionReasons
		reasons = reasons[:maxOmissionReasons]
	}
	r.Omitted = append(r.Omitted, Omission{File: where.file, Line: where.line, Reasons: reasons, More: more, before: before})
	return nil
}

// omittedError is what a partial import that converted nothing reports: every reason.
func (r *Result) omittedError() error {
	var errs []error
	for _, o := range r.Omitted {
		errs = append(errs, o.Reasons...)
		if o.More > 0 {
			errs = append(errs, &Error{o.File, o.Line, fmt.Sprintf("and %d more refusals", o.More)})
		}
	}
	return errors.Join(errs...)
}

// leaveOutInvalid leaves out the services the validation errors of their converted config
// name, at their source lines; ok is false when an error names no service (nothing was left
// out then).
func (r *Result) leaveOutInvalid(file string, err error) bool {
	var fields config.Errors
	if !errors.As(err, &fields) {
		return false
	}
	bad := map[int][]error{}
	for _, f := range fields {
		i, ok := serviceIndex(f.Path)
		if !ok || i >= len(r.Services) {
			return false
		}
		at, what := r.origin(file, f.Path)
		bad[i] = append(bad[i], &Error{at.file, at.line, fmt.Sprintf("refused: Sluice would not take the converted %s: %s", what, f.Msg)})
	}
	shift := func(before int) int {
		n := 0
		for i := range bad {
			if i < before {
				n++
			}
		}
		return before - n
	}
	// Ordered by 2*before for what stood before service i and 2*i+1 for service i itself,
	// the omissions keep the source's order.
	for i := range r.Omitted {
		r.Omitted[i].before *= 2
	}
	var kept []Service
	for i, s := range r.Services {
		if reasons, ok := bad[i]; ok {
			at := s.at
			if at.file == "" {
				at = pos{file, 1}
			}
			r.Omitted = append(r.Omitted, Omission{File: at.file, Line: at.line, Reasons: reasons, before: 2*i + 1})
			continue
		}
		kept = append(kept, s)
	}
	slices.SortStableFunc(r.Omitted, func(a, b Omission) int { return a.before - b.before })
	for i := range r.Omitted {
		r.Omitted[i].before = shift((r.Omitted[i].before + 1) / 2)
	}
	r.Services = kept
	return true
}

// serviceIndex is the index of the service a config path names.
func serviceIndex(path string) (int, bool) {
	m := servicePath.FindStringSubmatch(path)
	if m == nil {
		return 0, false
	}
	i, err := strconv.Atoi(m[1])
	return i, err == nil
}

// Summary says what a partial import converted and left out, with the lines, for standard
// error.
func (r *Result) Summary() string {
	var at []string
	for _, o := range r.Omitted {
		at = append(at, fmt.Sprintf("%s:%d", o.File, o.Line))
	}
	text := fmt.Sprintf("%d services converted, %d left out", len(r.Services), len(r.Omitted))
	if len(at) > 0 {
		text += ": " + strings.Join(at, ", ")
	}
	return text
}
