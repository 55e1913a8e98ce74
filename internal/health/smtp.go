package health

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/textproto"
	"os"
	"time"

	"github.com/sluicelb/sluice/internal/config"
)

// maxSMTPReplies bounds what an smtp check reads from a server in all: a banner and a reply.
const maxSMTPReplies = 16 << 10

// smtpChecker passes when the server greets with 220 and answers HELO with 250 (keepalived's
// SMTP_CHECK), in clear text; it then says QUIT.
type smtpChecker struct {
	helo string
}

func newSMTPChecker(hc *config.HealthCheck) *smtpChecker {
	return &smtpChecker{helo: cmpOr(hc.HELOName, defaultHELOName())}
}

// defaultHELOName is the balancer's host name, "localhost" when it has none.
func defaultHELOName() string {
	if name, err := os.Hostname(); err == nil && name != "" {
		return name
	}
	return "localhost"
}

func (c *smtpChecker) Check(ctx context.Context, target netip.AddrPort) Result {
	start := time.Now()
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "tcp", target.String())
	if err != nil {
		return networkFailure(ctx, start, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	replies := textproto.NewReader(bufio.NewReader(io.LimitReader(conn, maxSMTPReplies)))
	for _, step := range []struct {
		send string // sent before the reply is read; none for the banner
		want int
		what string
	}{{"", 220, "banner"}, {"HELO " + c.helo + "\r\n", 250, "HELO"}} {
		if _, err := io.WriteString(conn, step.send); err != nil {
			return networkFailure(ctx, start, err)
		}
		if reason := smtpExpect(replies, step.want, step.what); reason != "" {
			if why, ok := interrupted(ctx, start); ok {
				reason = why + " waiting for the " + step.what + " reply"
			}
			return failed(start, reason)
		}
	}
	io.WriteString(conn, "QUIT\r\n") // a courtesy: the check has passed
	return passed(start, "banner 220, HELO 250")
}

// smtpExpect reads one reply (of one or more lines) and says what is wrong with it: another
// code than want, or no reply; "" when it has code want.
func smtpExpect(replies *textproto.Reader, want int, what string) string {
	code, message, err := replies.ReadResponse(want)
	var protoErr *textproto.Error
	switch {
	case err == nil:
		return ""
	case errors.As(err, &protoErr):
		return fmt.Sprintf("%s %d %q, want %d", what, code, clip([]byte(message), 64), want)
	default:
		return fmt.Sprintf("%s: %v", what, err)
	}
}
