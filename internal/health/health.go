// Package health probes backends (tcp, http, https, udp, exec, smtp, icmp, dns) and tracks whether each is up,
// Seesaw style: a Checker runs one probe, a Monitor runs every probe on its interval and applies
// the rise/fall thresholds.
package health

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"time"

	"github.com/sluicelb/sluice/internal/config"
)

// Result is the outcome of one probe.
type Result struct {
	OK      bool
	Latency time.Duration
	// Message says why the probe failed ("connection refused", "status 503, want 200-399") or,
	// on success, what was seen.
	Message string
	At      time.Time // when the probe started
}

// Checker runs one probe against one target.
type Checker interface {
	// Check probes target; ctx carries the timeout.
	Check(ctx context.Context, target netip.AddrPort) Result
}

// NewChecker builds the checker of a health check (tcp, http, https, udp, exec, smtp, icmp, dns).
func NewChecker(hc *config.HealthCheck) (Checker, error) {
	if hc == nil {
		return nil, errors.New("no health check")
	}
	switch hc.Type {
	case config.CheckTCP:
		return tcpChecker{}, nil
	case config.CheckHTTP, config.CheckHTTPS:
		return newHTTPChecker(hc)
	case config.CheckUDP:
		return newUDPChecker(hc)
	case config.CheckExec:
		return newExecChecker(hc)
	case config.CheckSMTP:
		return newSMTPChecker(hc), nil
	case config.CheckICMP:
		return icmpChecker{}, nil
	case config.CheckDNS:
		return newDNSChecker(hc)
	}
	return nil, fmt.Errorf("unknown health check type %q", hc.Type)
}

// passed is the Result of a probe that started at start and succeeded.
func passed(start time.Time, note string) Result {
	return Result{OK: true, Latency: time.Since(start), Message: note, At: start}
}

// failed is the Result of a probe that started at start and failed for reason.
func failed(start time.Time, reason string) Result {
	return Result{Latency: time.Since(start), Message: reason, At: start}
}

// interrupted explains a probe whose context ended before it finished: "timed out after 1s" or
// "canceled". It reports false while the context is live.
func interrupted(ctx context.Context, start time.Time) (string, bool) {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		deadline, _ := ctx.Deadline()
		return "timed out after " + deadline.Sub(start).Round(time.Millisecond).String(), true
	case ctx.Err() != nil:
		return "canceled", true
	}
	return "", false
}

// networkFailure explains a failed network probe: the timeout when the context ended it, else the
// error shortened to its errno ("connection refused") when it has one, since the target is known.
func networkFailure(ctx context.Context, start time.Time, err error) Result {
	if reason, ok := interrupted(ctx, start); ok {
		return failed(start, reason)
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return failed(start, errno.Error())
	}
	return failed(start, err.Error())
}

// clip returns at most the first n bytes of b.
func clip(b []byte, n int) []byte {
	return b[:min(len(b), n)]
}

// brokenChecker stands in for a check that could not be built: every probe fails with the reason,
// so the backend falls and the reason shows in its status.
type brokenChecker struct{ err error }

func (b brokenChecker) Check(_ context.Context, _ netip.AddrPort) Result {
	return failed(time.Now(), "cannot check: "+b.err.Error())
}
