package health

import (
	"bufio"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/config"
)

// smtpServer is a tiny SMTP responder on loopback: it greets with banner and answers HELO with
// helo, recording the HELO lines it got.
type smtpServer struct {
	addr netip.AddrPort
	mu   sync.Mutex
	helo []string
}

func serveSMTP(t *testing.T, loopback netip.Addr, banner, helo string) *smtpServer {
	t.Helper()
	l, err := net.Listen("tcp", netip.AddrPortFrom(loopback, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	s := &smtpServer{addr: netip.MustParseAddrPort(l.Addr().String())}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return // closed by the cleanup
			}
			wg.Go(func() { s.session(conn, banner, helo) })
		}
	})
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
	return s
}

// session answers one client: the banner, then helo to HELO and 221 to QUIT.
func (s *smtpServer) session(conn net.Conn, banner, helo string) {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(probeTimeout))
	conn.Write([]byte(banner))
	lines := bufio.NewScanner(conn)
	for lines.Scan() {
		line := lines.Text()
		switch {
		case strings.HasPrefix(line, "HELO "):
			s.mu.Lock()
			s.helo = append(s.helo, line)
			s.mu.Unlock()
			conn.Write([]byte(helo))
		case line == "QUIT":
			conn.Write([]byte("221 bye\r\n"))
			return
		}
	}
}

func (s *smtpServer) heloLines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.helo
}

func TestSMTP(t *testing.T) {
	forEachLoopback(t, func(t *testing.T, loopback netip.Addr) {
		for _, tc := range []struct {
			name          string
			banner, helo  string
			heloName      string
			timeout       time.Duration
			ok            bool
			want, wantGot string
		}{
			{"ready", "220 mx.example ESMTP\r\n", "250 mx.example\r\n", "lb.example", probeTimeout,
				true, "banner 220, HELO 250", "HELO lb.example"},
			{"multi-line replies", "220-mx.example\r\n220 ESMTP\r\n", "250-mx.example\r\n250 8BITMIME\r\n", "lb.example",
				probeTimeout, true, "banner 220, HELO 250", "HELO lb.example"},
			{"banner 554", "554 mx.example no service\r\n", "250 ok\r\n", "lb.example", probeTimeout,
				false, `banner 554 "mx.example no service", want 220`, ""},
			{"HELO refused", "220 mx.example\r\n", "501 bad name\r\n", "lb.example", probeTimeout,
				false, `HELO 501 "bad name", want 250`, "HELO lb.example"},
			{"no banner", "", "", "lb.example", 50 * time.Millisecond,
				false, "timed out after 50ms waiting for the banner reply", ""},
			{"not SMTP", "HTTP/1.1 400 Bad Request\r\n", "", "lb.example", probeTimeout, false, "banner:", ""},
			{"default HELO name", "220 mx\r\n", "250 mx\r\n", "", probeTimeout,
				true, "banner 220, HELO 250", "HELO " + defaultHELOName()},
		} {
			t.Run(tc.name, func(t *testing.T) {
				server := serveSMTP(t, loopback, tc.banner, tc.helo)
				hc := config.HealthCheck{Type: config.CheckSMTP, HELOName: tc.heloName}
				wantResult(t, check(t, hc, server.addr, tc.timeout), tc.ok, tc.want)
				if got := server.heloLines(); tc.wantGot != "" && (len(got) != 1 || got[0] != tc.wantGot) {
					t.Errorf("the server got %q, want [%q]", got, tc.wantGot)
				}
			})
		}
		t.Run("closed port", func(t *testing.T) {
			r := check(t, config.HealthCheck{Type: config.CheckSMTP}, closedPort(t, "tcp", loopback), probeTimeout)
			wantResult(t, r, false, "connection refused")
		})
	})
}
