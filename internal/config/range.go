package config

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Range is an inclusive range of integers written 80 or "8000-8010": service ports, expected
// HTTP status codes. Text that is not a range decodes into an invalid Range that Validate reports
// with the field's path and line.
type Range struct {
	First, Last int
	invalid     string // the text that did not parse
}

// UnmarshalYAML accepts 80 or "8000-8010".
func (r *Range) UnmarshalYAML(n *yaml.Node) error {
	*r = rangeOrInvalid(n.Value)
	return nil
}

// MarshalYAML writes the range back the way an operator writes it.
func (r Range) MarshalYAML() (any, error) {
	if r.IsRange() {
		return r.String(), nil
	}
	return r.First, nil
}

// UnmarshalJSON accepts 80 or "8000-8010".
func (r *Range) UnmarshalJSON(data []byte) error {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	var text string
	switch v := v.(type) {
	case float64:
		text = strconv.FormatFloat(v, 'f', -1, 64)
	case string:
		text = v
	default:
		return &json.UnmarshalTypeError{Value: string(data), Type: reflect.TypeFor[Range]()}
	}
	*r = rangeOrInvalid(text)
	return nil
}

func rangeOrInvalid(text string) Range {
	r, err := ParseRange(text)
	if err != nil {
		return Range{invalid: text}
	}
	return r
}

// Err reports text that did not decode as a range.
func (r Range) Err() error {
	if r.invalid == "" {
		return nil
	}
	_, err := ParseRange(r.invalid)
	return err
}

// MarshalJSON writes 80 or "8000-8010".
func (r Range) MarshalJSON() ([]byte, error) {
	if r.IsRange() {
		return json.Marshal(r.String())
	}
	return json.Marshal(r.First)
}

// ParseRange parses "80" or "8000-8010".
func ParseRange(s string) (Range, error) {
	first, last, isRange := strings.Cut(strings.TrimSpace(s), "-")
	if !isRange {
		last = first
	}
	a, err1 := strconv.Atoi(strings.TrimSpace(first))
	b, err2 := strconv.Atoi(strings.TrimSpace(last))
	if err1 != nil || err2 != nil {
		return Range{}, fmt.Errorf("%q is not a number or a range like 8000-8010", s)
	}
	return Range{First: a, Last: b}, nil
}

// String renders "80" or "8000-8010".
func (r Range) String() string {
	if r.IsRange() {
		return fmt.Sprintf("%d-%d", r.First, r.Last)
	}
	return strconv.Itoa(r.First)
}

// IsRange tells whether the range covers more than one value.
func (r Range) IsRange() bool { return r.First != r.Last }

// IsZero tells whether the range is unset.
func (r Range) IsZero() bool { return r == Range{} }

// overlaps tells whether a value is in both ranges.
func (r Range) overlaps(o Range) bool { return r.First <= o.Last && o.First <= r.Last }

// Contains tells whether v is in the range.
func (r Range) Contains(v int) bool { return r.First <= v && v <= r.Last }
