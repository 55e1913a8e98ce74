package health

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/config"
)

// probeTimeout bounds one probe in checker tests.
const probeTimeout = 2 * time.Second

// check builds the checker of hc and runs it once against target with timeout.
func check(t *testing.T, hc config.HealthCheck, target netip.AddrPort, timeout time.Duration) Result {
	t.Helper()
	c, err := NewChecker(&hc)
	if err != nil {
		t.Fatalf("NewChecker(%+v): %v", hc, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return c.Check(ctx, target)
}

// wantResult fails the test unless r passed (ok) or failed with a message containing text.
func wantResult(t *testing.T, r Result, ok bool, text string) {
	t.Helper()
	if r.OK != ok || !strings.Contains(r.Message, text) {
		t.Errorf("result OK=%v %q, want OK=%v with %q", r.OK, r.Message, ok, text)
	}
	if r.At.IsZero() || r.Latency < 0 {
		t.Errorf("result At=%v Latency=%v, want a start time and a latency", r.At, r.Latency)
	}
}

// forEachLoopback runs test once per loopback address, skipping ::1 where it is missing.
func forEachLoopback(t *testing.T, test func(t *testing.T, loopback netip.Addr)) {
	for _, addr := range []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()} {
		t.Run(addr.String(), func(t *testing.T) {
			if l, err := net.Listen("tcp", netip.AddrPortFrom(addr, 0).String()); err != nil {
				t.Skipf("%s is not available: %v", addr, err)
			} else {
				l.Close()
			}
			test(t, addr)
		})
	}
}

// closedPort returns an address on loopback where nothing listens (TCP or UDP).
func closedPort(t *testing.T, network string, loopback netip.Addr) netip.AddrPort {
	t.Helper()
	var addr net.Addr
	switch network {
	case "tcp":
		l, err := net.Listen("tcp", netip.AddrPortFrom(loopback, 0).String())
		if err != nil {
			t.Fatal(err)
		}
		addr = l.Addr()
		l.Close()
	case "udp":
		c, err := net.ListenPacket("udp", netip.AddrPortFrom(loopback, 0).String())
		if err != nil {
			t.Fatal(err)
		}
		addr = c.LocalAddr()
		c.Close()
	}
	return netip.MustParseAddrPort(addr.String())
}

func TestNewCheckerRejectsNonsense(t *testing.T) {
	for _, tc := range []struct {
		name string
		hc   *config.HealthCheck
		want string
	}{
		{"nil", nil, "no health check"},
		{"unknown type", &config.HealthCheck{Type: "ldap"}, `unknown health check type "ldap"`},
		{"empty type", &config.HealthCheck{}, `unknown health check type ""`},
		{"udp expecting without send", &config.HealthCheck{Type: "udp", Expect: "pong"}, "needs a datagram"},
		{"dns name too long", &config.HealthCheck{Type: "dns", QueryName: strings.Repeat("x", 64)}, "query_name"},
		{"exec without command", &config.HealthCheck{Type: "exec"}, "needs a command"},
		{"exec with empty command", &config.HealthCheck{Type: "exec", Command: []string{""}}, "needs a command"},
		{"http relative path", &config.HealthCheck{Type: "http", Path: "healthz"}, "not a path"},
		{"http path with a host", &config.HealthCheck{Type: "http", Path: "//elsewhere/x"}, "not a path"},
		{"http reversed status range", &config.HealthCheck{Type: "http",
			ExpectStatus: []config.Range{{First: 299, Last: 200}}}, "not a status"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewChecker(tc.hc)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewChecker = %v, %v; want an error with %q", c, err, tc.want)
			}
		})
	}
}
