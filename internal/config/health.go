package config

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
)

// CheckMethods are the HTTP methods a check may use.
var CheckMethods = []string{"GET", "HEAD", "POST", "OPTIONS"}

// DefaultCheckMethod is the method of an http check that sets none.
const DefaultCheckMethod = "GET"

// Health-check defaults.
const (
	DefaultCheckInterval = 2 * time.Second
	DefaultCheckTimeout  = time.Second
	DefaultRise          = 2
	DefaultFall          = 3
	// minCheckDuration and maxCheckDuration bound a check's interval and timeout (10ms, 1h).
	minCheckDuration = 10 * time.Millisecond
	maxCheckDuration = time.Hour
)

// HealthCheck says how a service's backends are probed. Services whose checks are identical and
// whose backends are the same share one probe per backend.
type HealthCheck struct {
	// Type is tcp (connect), http, https, udp (send, expect; or no port unreachable), exec
	// (exit code 0 means up), smtp (banner, HELO), icmp (echo) or dns (a query).
	Type CheckType `yaml:"type" json:"type"`
	// Port is probed instead of the backend's port (or, for a port range or dsr, the service's first port).
	Port int `yaml:"port,omitempty" json:"port,omitempty"`
	// Interval between probes (default 2s) and Timeout of one probe (default 1s, at most the interval).
	Interval Duration `yaml:"interval,omitempty" json:"interval,omitzero"`
	Timeout  Duration `yaml:"timeout,omitempty" json:"timeout,omitzero"`
	// Rise consecutive successes bring a backend up (default 2); Fall failures take it down (default 3).
	Rise int `yaml:"rise,omitempty" json:"rise,omitempty"`
	Fall int `yaml:"fall,omitempty" json:"fall,omitempty"`
	// OnFailure is what happens to a fallen backend's established flows: inhibit keeps them
	// (default), reset drops them so their clients reconnect elsewhere.
	OnFailure OnFailure `yaml:"on_failure,omitempty" json:"on_failure,omitempty"`

	// HTTP and HTTPS: the request and what the answer must be.
	Method string `yaml:"method,omitempty" json:"method,omitempty"`
	Path   string `yaml:"path,omitempty" json:"path,omitempty"`
	Host   string `yaml:"host,omitempty" json:"host,omitempty"`
	// ExpectStatus lists accepted status codes and ranges (default 200-399).
	ExpectStatus []Range `yaml:"expect_status,omitempty" json:"expect_status,omitempty"`
	// ExpectBody, when set, must occur in the first 64 KiB of the body.
	ExpectBody string `yaml:"expect_body,omitempty" json:"expect_body,omitempty"`
	// ExpectDigest, when set, is the MD5 of the body in hex (keepalived's digest, genhash's output).
	ExpectDigest string `yaml:"expect_digest,omitempty" json:"expect_digest,omitempty"`
	// InsecureSkipVerify accepts any certificate (https).
	InsecureSkipVerify bool `yaml:"insecure_skip_verify,omitempty" json:"insecure_skip_verify,omitempty"`

	// UDP: the datagram sent and the text the answer must contain (any answer when empty).
	// Without Send, an empty datagram is sent and only an ICMP port unreachable is down.
	Send   string `yaml:"send,omitempty" json:"send,omitempty"`
	Expect string `yaml:"expect,omitempty" json:"expect,omitempty"`

	// Command is run for exec checks, with SLUICE_BACKEND_ADDRESS and SLUICE_BACKEND_PORT set
	// and {address} and {port} replaced in its arguments.
	Command []string `yaml:"command,omitempty" json:"command,omitempty"`

	// HELOName is the name an smtp check says HELO with (default: the balancer's host name).
	HELOName string `yaml:"helo_name,omitempty" json:"helo_name,omitempty"`

	// DNS: the name and record type asked for (default . SOA) and the transport (default udp).
	QueryName     string       `yaml:"query_name,omitempty" json:"query_name,omitempty"`
	QueryType     DNSQueryType `yaml:"query_type,omitempty" json:"query_type,omitempty"`
	QueryProtocol DNSTransport `yaml:"query_protocol,omitempty" json:"query_protocol,omitempty"`
}

// The placeholders an exec check's arguments may hold: the probed address and port.
const (
	AddressPlaceholder = "{address}"
	PortPlaceholder    = "{port}"
)

// DefaultQueryName is the name a dns check asks for when it sets none (as keepalived's DNS_CHECK).
const DefaultQueryName = "."

// maxDNSName is the longest DNS name in text, without the final dot.
const maxDNSName = 253

// digestPattern is an MD5 digest in hex; namePattern a HELO or DNS name.
var (
	digestPattern = regexp.MustCompile(`^[0-9a-fA-F]{32}$`)
	namePattern   = regexp.MustCompile(`^[A-Za-z0-9_.:\[\]-]+$`)
)

// clone returns a deep copy of h (nil for nil).
func (h *HealthCheck) clone() *HealthCheck {
	if h == nil {
		return nil
	}
	c := *h
	c.ExpectStatus = slices.Clone(h.ExpectStatus)
	c.Command = slices.Clone(h.Command)
	return &c
}

// IntervalOrDefault is the parsed interval.
func (h *HealthCheck) IntervalOrDefault() time.Duration {
	return h.Interval.Or(DefaultCheckInterval)
}

// TimeoutOrDefault is the parsed timeout; unset, it is 1s or the interval when that is shorter.
func (h *HealthCheck) TimeoutOrDefault() time.Duration {
	return h.Timeout.Or(min(DefaultCheckTimeout, h.IntervalOrDefault()))
}

// validate checks the health check and fills in its defaults.
func (h *HealthCheck) validate(at string, fail func(path, format string, args ...any)) {
	h.Type = oneOf(h.Type, CheckTypes, DefaultCheckType, at+".type", fail)
	h.OnFailure = oneOf(h.OnFailure, OnFailures, DefaultOnFailure, at+".on_failure", fail)
	if !anyPortBounds.has(h.Port) {
		fail(at+".port", "%d is not a port in %s", h.Port, portBounds)
	}
	inRange := true
	for _, d := range []struct {
		field string
		value Duration
	}{{"interval", h.Interval}, {"timeout", h.Timeout}} {
		if !d.value.IsZero() && !d.value.within(minCheckDuration, maxCheckDuration, 1) {
			fail(at+"."+d.field, "%q is not a duration between 10ms and 1h (like 2s)", d.value)
			inRange = false
		}
	}
	if interval, timeout := h.IntervalOrDefault(), h.TimeoutOrDefault(); inRange && timeout > interval {
		fail(at+".timeout", "%s is longer than the interval %s", timeout, interval)
	}
	if h.Rise == 0 {
		h.Rise = DefaultRise
	}
	if h.Fall == 0 {
		h.Fall = DefaultFall
	}
	if !riseFallBounds.has(h.Rise) {
		fail(at+".rise", "%d is out of range %s", h.Rise, riseFallBounds)
	}
	if !riseFallBounds.has(h.Fall) {
		fail(at+".fall", "%d is out of range %s", h.Fall, riseFallBounds)
	}
	isHTTP := h.Type.IsHTTP()
	onlyFor := func(field string, set bool, ok bool, types string) {
		if set && !ok {
			fail(at+"."+field, "only applies to %s checks, not %s", types, h.Type)
		}
	}
	onlyFor("method", h.Method != "", isHTTP, "http and https")
	onlyFor("path", h.Path != "", isHTTP, "http and https")
	onlyFor("host", h.Host != "", isHTTP, "http and https")
	onlyFor("expect_status", len(h.ExpectStatus) > 0, isHTTP, "http and https")
	onlyFor("expect_body", h.ExpectBody != "", isHTTP, "http and https")
	onlyFor("insecure_skip_verify", h.InsecureSkipVerify, h.Type == CheckHTTPS, "https")
	onlyFor("expect_digest", h.ExpectDigest != "", isHTTP, "http and https")
	onlyFor("send", h.Send != "", h.Type == CheckUDP, "udp")
	onlyFor("expect", h.Expect != "", h.Type == CheckUDP, "udp")
	onlyFor("command", len(h.Command) > 0, h.Type == CheckExec, "exec")
	onlyFor("helo_name", h.HELOName != "", h.Type == CheckSMTP, "smtp")
	onlyFor("query_name", h.QueryName != "", h.Type == CheckDNS, "dns")
	onlyFor("query_type", h.QueryType != "", h.Type == CheckDNS, "dns")
	onlyFor("query_protocol", h.QueryProtocol != "", h.Type == CheckDNS, "dns")
	onlyFor("port", h.Port != 0, h.Type != CheckICMP, "port-based")
	if isHTTP {
		h.Method = oneOf(h.Method, CheckMethods, DefaultCheckMethod, at+".method", fail)
		if h.Path == "" {
			h.Path = "/"
		}
		if err := checkPath(h.Path); err != nil {
			fail(at+".path", "%v", err)
		}
		if h.Host != "" && !httpguts.ValidHostHeader(h.Host) {
			fail(at+".host", "%q is not a host name or host:port for a Host header", h.Host)
		}
		for i, r := range h.ExpectStatus {
			if err := r.Err(); err != nil {
				fail(fmt.Sprintf("%s.expect_status[%d]", at, i), "%v", err)
			} else if !statusBounds.has(r.First) || !statusBounds.has(r.Last) || r.First > r.Last {
				fail(fmt.Sprintf("%s.expect_status[%d]", at, i), "%s is not a status code or range within %s", r, statusBounds)
			}
		}
	}
	if isHTTP && h.ExpectDigest != "" {
		if !digestPattern.MatchString(h.ExpectDigest) {
			fail(at+".expect_digest", "%q is not an MD5 digest: 32 hex digits, as genhash prints", h.ExpectDigest)
		}
		h.ExpectDigest = strings.ToLower(h.ExpectDigest)
	}
	if h.Type == CheckUDP && h.Send == "" && h.Expect != "" {
		fail(at+".expect", "needs send: without a datagram to send, a udp check waits for no reply")
	}
	if h.Type == CheckSMTP && h.HELOName != "" && (len(h.HELOName) > maxDNSName || !namePattern.MatchString(h.HELOName)) {
		fail(at+".helo_name", "%q is not a host name (letters, digits, . - _, at most %d)", h.HELOName, maxDNSName)
	}
	if h.Type == CheckDNS {
		h.validateDNS(at, fail)
	}
	if h.Type == CheckExec && (len(h.Command) == 0 || h.Command[0] == "") {
		fail(at+".command", "an exec check needs a command, like [/usr/local/bin/check-db]")
	}
}

// validateDNS checks a dns check's query and fills in its defaults.
func (h *HealthCheck) validateDNS(at string, fail func(path, format string, args ...any)) {
	h.QueryType = oneOf(h.QueryType, DNSQueryTypes, DefaultDNSQueryType, at+".query_type", fail)
	h.QueryProtocol = oneOf(h.QueryProtocol, DNSTransports, DefaultDNSTransport, at+".query_protocol", fail)
	if h.QueryName == "" {
		h.QueryName = DefaultQueryName
	}
	if h.QueryName != DefaultQueryName && !isDNSName(h.QueryName) {
		fail(at+".query_name", "%q is not a DNS name like www.example.com (letters, digits, - and _, labels of at most 63, at most %d in all)", h.QueryName, maxDNSName)
	}
}

// isDNSName tells whether name is a DNS name in text, with or without the final dot.
func isDNSName(name string) bool {
	name = strings.TrimSuffix(name, ".")
	if name == "" || len(name) > maxDNSName || !namePattern.MatchString(name) || strings.ContainsAny(name, ":[]") {
		return false
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
	}
	return true
}

// checkPath checks an http check's request path: it starts with / and holds no space or control
// character, which would end the request line or start a header of its own.
func checkPath(path string) error {
	if path[0] != '/' {
		return fmt.Errorf("%q does not start with /", path)
	}
	if i := strings.IndexFunc(path, func(r rune) bool { return r <= ' ' || r == 0x7f }); i >= 0 {
		return fmt.Errorf("%q holds %q: percent-encode it (%%20 for a space)", path, path[i])
	}
	if u, err := url.Parse(path); err != nil || u.Host != "" {
		return fmt.Errorf("%q is not a path like /healthz", path)
	}
	return nil
}
