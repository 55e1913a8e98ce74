package health

import (
	"context"
	"net"
	"net/netip"
	"time"
)

// tcpChecker passes when a TCP connection to the target is established.
type tcpChecker struct{}

func (tcpChecker) Check(ctx context.Context, target netip.AddrPort) Result {
	start := time.Now()
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "tcp", target.String())
	if err != nil {
		return networkFailure(ctx, start, err)
	}
	conn.Close()
	return passed(start, "connected")
}
