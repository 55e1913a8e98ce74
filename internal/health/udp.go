package health

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/sluicelb/sluice/internal/config"
)

// maxReply is the largest UDP reply read; longer ones are truncated.
const maxReply = 64 << 10

// udpChecker sends one datagram over a connected socket and waits for a reply. Being connected,
// the socket reports an ICMP port unreachable as "connection refused", a fast failure.
//
// Without a datagram to send (keepalived's UDP_CHECK without a payload) it sends an empty one
// and passes unless a port unreachable comes back within the timeout: silence is up.
type udpChecker struct {
	send, expect []byte
}

func newUDPChecker(hc *config.HealthCheck) (*udpChecker, error) {
	if hc.Send == "" && hc.Expect != "" {
		return nil, errors.New("a udp health check that expects a reply needs a datagram to send")
	}
	return &udpChecker{send: []byte(hc.Send), expect: []byte(hc.Expect)}, nil
}

func (c *udpChecker) Check(ctx context.Context, target netip.AddrPort) Result {
	start := time.Now()
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "udp", target.String())
	if err != nil {
		return networkFailure(ctx, start, err)
	}
	defer conn.Close()
	// End the read when the context ends, by deadline or by cancellation.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	if _, err := conn.Write(c.send); err != nil {
		return networkFailure(ctx, start, err)
	}
	reply := make([]byte, maxReply)
	n, err := conn.Read(reply)
	if err != nil {
		if len(c.send) == 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return passed(start, "no port unreachable within the timeout")
		}
		return networkFailure(ctx, start, err)
	}
	reply = reply[:n]
	if !bytes.Contains(reply, c.expect) {
		return failed(start, fmt.Sprintf("reply %q lacks %q", clip(reply, 64), c.expect))
	}
	return passed(start, fmt.Sprintf("%d-byte reply", n))
}
