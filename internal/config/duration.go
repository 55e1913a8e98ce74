package config

import (
	"time"

	"go.yaml.in/yaml/v3"
)

// Duration is a span of time of the config (a flow timeout, a check's interval, a hold time),
// parsed while decoding. It keeps the text it was written as, which it is written back as ("1m"
// stays "1m", not "1m0s"). Text that is not a duration decodes into a Duration that is not valid
// and keeps the text, for Validate to report with the field's path and line; the zero Duration
// is an unset one.
type Duration struct {
	time.Duration
	text  string // as written
	valid bool   // text parsed
}

// DurationFrom is the Duration of d, written as d.String().
func DurationFrom(d time.Duration) Duration {
	return Duration{Duration: d, text: d.String(), valid: true}
}

// DurationOf parses text as it is decoded: a duration, or an invalid Duration holding text.
func DurationOf(text string) Duration {
	d, err := time.ParseDuration(text)
	if err != nil {
		return Duration{text: text}
	}
	return Duration{Duration: d, text: text, valid: true}
}

// IsValid tells a Duration that parsed from one that is unset or did not.
func (d Duration) IsValid() bool { return d.valid }

// IsZero tells an unset Duration (omitempty, omitzero).
func (d Duration) IsZero() bool { return d == Duration{} }

// Or is the duration, def when it is unset or did not parse.
func (d Duration) Or(def time.Duration) time.Duration {
	if !d.valid {
		return def
	}
	return d.Duration
}

// within tells a valid Duration from lo to hi, a whole number of unit.
func (d Duration) within(lo, hi, unit time.Duration) bool {
	return d.valid && lo <= d.Duration && d.Duration <= hi && d.Duration%unit == 0
}

// String is the text the duration was written as ("" when unset).
func (d Duration) String() string { return d.text }

// MarshalText writes the duration as String does (YAML and JSON write it as a string).
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.text), nil }

// UnmarshalText decodes text as DurationOf does: text that is not a duration is Validate's to
// report.
func (d *Duration) UnmarshalText(text []byte) error {
	*d = DurationOf(string(text))
	return nil
}

// UnmarshalYAML decodes a scalar as UnmarshalText does.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	*d = DurationOf(n.Value)
	return nil
}

// UnmarshalJSON decodes a JSON string as UnmarshalText does; null leaves d as it is.
func (d *Duration) UnmarshalJSON(data []byte) error {
	text, err := jsonText(data)
	if err != nil || text == nil {
		return err
	}
	return d.UnmarshalText([]byte(*text))
}
