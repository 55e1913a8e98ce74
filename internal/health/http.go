package health

import (
	"bytes"
	"context"
	"crypto/md5" //nolint:gosec // keepalived's digest is MD5: a page's fingerprint, not a secret
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/sluicelb/sluice/internal/config"
)

// maxBodyScan is how much of a response body ExpectBody is searched in and ExpectDigest hashes.
const maxBodyScan = 64 << 10

// maxHeaderBytes bounds a probe's response headers (a health endpoint's are a few hundred bytes):
// a backend that sends more fails the probe instead of holding Go's default 10 MiB per probe.
const maxHeaderBytes = 64 << 10

// defaultExpectStatus is what an http check accepts when it lists no status.
var defaultExpectStatus = []config.Range{{First: 200, Last: 399}}

// httpChecker sends one request over a fresh connection and judges the status and body.
type httpChecker struct {
	client       *http.Client
	method       string
	request      url.URL // scheme, path and query; the host is the target
	host         string  // Host header, when set
	expectStatus []config.Range
	expectBody   []byte
	expectDigest string // lowercase hex MD5 of the body, when set
}

func newHTTPChecker(hc *config.HealthCheck) (*httpChecker, error) {
	path := hc.Path
	if path == "" {
		path = "/"
	}
	request, err := url.Parse(path)
	if err != nil || !strings.HasPrefix(path, "/") || request.Host != "" {
		return nil, fmt.Errorf("health check path %q is not a path like /healthz", hc.Path)
	}
	request.Scheme = string(hc.Type)
	method := hc.Method
	if method == "" {
		method = http.MethodGet
	}
	expectStatus := hc.ExpectStatus
	if len(expectStatus) == 0 {
		expectStatus = defaultExpectStatus
	}
	for _, r := range expectStatus {
		if r.Err() != nil || r.First > r.Last {
			return nil, fmt.Errorf("health check expect_status %s is not a status or range", r)
		}
	}
	transport := &http.Transport{
		Proxy:                  nil, // probe the backend itself, whatever the environment says
		DisableKeepAlives:      true,
		MaxResponseHeaderBytes: maxHeaderBytes,
		TLSClientConfig: &tls.Config{
			ServerName:         serverName(hc.Host),
			InsecureSkipVerify: hc.InsecureSkipVerify,
		},
	}
	return &httpChecker{
		client: &http.Client{
			Transport: transport,
			// A redirect is an answer to judge by expect_status, not to follow.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		method:       method,
		request:      *request,
		host:         hc.Host,
		expectStatus: expectStatus,
		expectBody:   []byte(hc.ExpectBody),
		expectDigest: strings.ToLower(hc.ExpectDigest),
	}, nil
}

// serverName is the TLS server name for a Host header: its host without the port.
func serverName(host string) string {
	if name, _, err := net.SplitHostPort(host); err == nil {
		return name
	}
	return host
}

func (c *httpChecker) Check(ctx context.Context, target netip.AddrPort) Result {
	start := time.Now()
	u := c.request
	u.Host = target.String()
	req, err := http.NewRequestWithContext(ctx, c.method, u.String(), nil)
	if err != nil {
		return failed(start, err.Error())
	}
	req.Host = c.host
	req.Header.Set("User-Agent", "sluice-health-check")
	resp, err := c.client.Do(req)
	if err != nil {
		var urlErr *url.Error
		if errors.As(err, &urlErr) {
			err = urlErr.Err // drop the "Get <url>:" prefix; the target is known
		}
		return networkFailure(ctx, start, err)
	}
	defer resp.Body.Close()
	if !c.statusExpected(resp.StatusCode) {
		return failed(start, fmt.Sprintf("status %d, want %s", resp.StatusCode, rangesText(c.expectStatus)))
	}
	if len(c.expectBody) == 0 && c.expectDigest == "" {
		return passed(start, fmt.Sprintf("status %d", resp.StatusCode))
	}
	// One byte past the bound tells a body longer than it, which has no digest to compare.
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBodyScan+1))
	if err != nil {
		return networkFailure(ctx, start, err)
	}
	if reason := c.judgeBody(body); reason != "" {
		return failed(start, fmt.Sprintf("status %d, %s", resp.StatusCode, reason))
	}
	return passed(start, fmt.Sprintf("status %d", resp.StatusCode))
}

// judgeBody says what is wrong with a body read up to one byte past maxBodyScan: the text
// expect_body wants missing from its first maxBodyScan bytes, or a digest other than
// expect_digest; "" when nothing is.
func (c *httpChecker) judgeBody(body []byte) string {
	if len(c.expectBody) > 0 && !bytes.Contains(clip(body, maxBodyScan), c.expectBody) {
		return fmt.Sprintf("body lacks %q", c.expectBody)
	}
	if c.expectDigest == "" {
		return ""
	}
	if len(body) > maxBodyScan {
		return fmt.Sprintf("body longer than %d KiB, the most expect_digest hashes", maxBodyScan>>10)
	}
	sum := md5.Sum(body)
	if got := hex.EncodeToString(sum[:]); got != c.expectDigest {
		return fmt.Sprintf("body digest %s, want %s", got, c.expectDigest)
	}
	return ""
}

func (c *httpChecker) statusExpected(status int) bool {
	for _, r := range c.expectStatus {
		if r.Contains(status) {
			return true
		}
	}
	return false
}

// rangesText renders ranges the way an operator writes them: "200-299,302".
func rangesText(ranges []config.Range) string {
	texts := make([]string, len(ranges))
	for i, r := range ranges {
		texts[i] = r.String()
	}
	return strings.Join(texts, ",")
}
