package health

import (
	"net"
	"net/netip"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
)

func TestTCP(t *testing.T) {
	forEachLoopback(t, func(t *testing.T, loopback netip.Addr) {
		l, err := net.Listen("tcp", netip.AddrPortFrom(loopback, 0).String())
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		tcp := config.HealthCheck{Type: "tcp"}

		t.Run("listening", func(t *testing.T) {
			r := check(t, tcp, netip.MustParseAddrPort(l.Addr().String()), probeTimeout)
			wantResult(t, r, true, "connected")
		})
		t.Run("closed port", func(t *testing.T) {
			r := check(t, tcp, closedPort(t, "tcp", loopback), probeTimeout)
			wantResult(t, r, false, "connection refused")
		})
	})
}
