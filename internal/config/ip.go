package config

import (
	"encoding/json"
	"net/netip"

	"go.yaml.in/yaml/v3"
)

// IP is an address of the config (a VIP, a backend, a BGP peer, next hop or router ID), parsed
// while decoding. Text that is not an address decodes into an IP that is not valid and keeps the
// text, for Validate to report with the field's path and line; the zero IP is an unset address.
type IP struct {
	netip.Addr
	invalid string // the text that did not parse
}

// IPFrom is the IP of a.
func IPFrom(a netip.Addr) IP { return IP{Addr: a} }

// IPOf parses text as it is decoded: an address, or an invalid IP holding text.
func IPOf(text string) IP {
	a, err := netip.ParseAddr(text)
	if err != nil {
		return IP{invalid: text}
	}
	return IP{Addr: a}
}

// String is the address, or the text that did not parse ("" when unset).
func (ip IP) String() string {
	if ip.IsValid() {
		return ip.Addr.String()
	}
	return ip.invalid
}

// Canonical is ip in the one form Sluice keeps: an IPv4-mapped IPv6 address as the IPv4 address
// it stands for (::ffff:10.0.0.1 is 10.0.0.1). An invalid IP comes back as it is.
func (ip IP) Canonical() IP {
	if ip.IsValid() {
		ip.Addr = ip.Unmap()
	}
	return ip
}

// IsZero tells an unset address (omitempty, omitzero).
func (ip IP) IsZero() bool { return ip == IP{} }

// AppendText appends the address as String does. It must be IP's own: encoding/json from Go 1.27
// writes with an AppendText before a MarshalText, and netip.Addr's, promoted, would write an
// invalid IP as "" instead of its text.
func (ip IP) AppendText(b []byte) ([]byte, error) { return append(b, ip.String()...), nil }

// MarshalText writes the address as String does (YAML and JSON write it as a string).
func (ip IP) MarshalText() ([]byte, error) { return ip.AppendText(nil) }

// UnmarshalText decodes text as IPOf does: text that is not an address is Validate's to report.
func (ip *IP) UnmarshalText(text []byte) error {
	*ip = IPOf(string(text))
	return nil
}

// UnmarshalYAML decodes a scalar as UnmarshalText does.
func (ip *IP) UnmarshalYAML(n *yaml.Node) error {
	*ip = IPOf(n.Value)
	return nil
}

// UnmarshalJSON decodes a JSON string as UnmarshalText does; null leaves ip as it is.
func (ip *IP) UnmarshalJSON(data []byte) error {
	text, err := jsonText(data)
	if err != nil || text == nil {
		return err
	}
	return ip.UnmarshalText([]byte(*text))
}

// Prefix is a source list entry, parsed while decoding: a prefix (10.0.0.0/8) or an address (a
// /32 or /128, written back as the address). Text that is not one decodes into a Prefix that is
// not valid and keeps the text, for Validate to report.
type Prefix struct {
	netip.Prefix
	invalid string // the text that did not parse
	bare    bool   // written as an address, without a length
}

// PrefixFrom is the Prefix of p.
func PrefixFrom(p netip.Prefix) Prefix { return Prefix{Prefix: p} }

// PrefixOf parses text as it is decoded (see ParseSourcePrefix): a prefix, or an invalid Prefix
// holding text.
func PrefixOf(text string) Prefix {
	p, err := ParseSourcePrefix(text)
	if err != nil {
		return Prefix{invalid: text}
	}
	_, addrErr := netip.ParseAddr(text)
	return Prefix{Prefix: p, bare: addrErr == nil}
}

// Err reports text that did not decode as a source list entry.
func (p Prefix) Err() error {
	if p.IsValid() {
		return nil
	}
	_, err := ParseSourcePrefix(p.invalid)
	return err
}

// String is the prefix (an address written alone stays alone), or the text that did not parse.
func (p Prefix) String() string {
	switch {
	case !p.IsValid():
		return p.invalid
	case p.bare:
		return p.Addr().String()
	}
	return p.Prefix.String()
}

// AppendText appends the entry as String does. It must be Prefix's own: encoding/json from Go
// 1.27 writes with an AppendText before a MarshalText, and netip.Prefix's, promoted, would write
// an address given alone as a /32 or /128.
func (p Prefix) AppendText(b []byte) ([]byte, error) { return append(b, p.String()...), nil }

// MarshalText writes the entry as String does.
func (p Prefix) MarshalText() ([]byte, error) { return p.AppendText(nil) }

// UnmarshalText decodes text as PrefixOf does.
func (p *Prefix) UnmarshalText(text []byte) error {
	*p = PrefixOf(string(text))
	return nil
}

// UnmarshalYAML decodes a scalar as UnmarshalText does.
func (p *Prefix) UnmarshalYAML(n *yaml.Node) error {
	*p = PrefixOf(n.Value)
	return nil
}

// UnmarshalJSON decodes a JSON string as UnmarshalText does; null leaves p as it is.
func (p *Prefix) UnmarshalJSON(data []byte) error {
	text, err := jsonText(data)
	if err != nil || text == nil {
		return err
	}
	return p.UnmarshalText([]byte(*text))
}

// jsonText reads a JSON string, nil for null; anything else is the *json.UnmarshalTypeError a
// string field gives, which the decoder completes with the field's path.
func jsonText(data []byte) (*string, error) {
	if string(data) == "null" {
		return nil, nil
	}
	var text string
	if err := json.Unmarshal(data, &text); err != nil {
		return nil, err
	}
	return &text, nil
}
