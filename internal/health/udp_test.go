package health

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/config"
)

// serveUDP listens on loopback and answers each datagram with reply(datagram), or not at all
// when reply returns nil.
func serveUDP(t *testing.T, loopback netip.Addr, reply func([]byte) []byte) netip.AddrPort {
	t.Helper()
	conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(loopback, 0)))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, from, err := conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				return // closed by the cleanup
			}
			if answer := reply(buf[:n]); answer != nil {
				conn.WriteToUDPAddrPort(answer, from)
			}
		}
	}()
	t.Cleanup(func() {
		conn.Close()
		<-done
	})
	return conn.LocalAddr().(*net.UDPAddr).AddrPort()
}

func TestUDP(t *testing.T) {
	forEachLoopback(t, func(t *testing.T, loopback netip.Addr) {
		pong := serveUDP(t, loopback, func(ping []byte) []byte { return append([]byte("pong to "), ping...) })
		silent := serveUDP(t, loopback, func([]byte) []byte { return nil })
		for _, tc := range []struct {
			name    string
			hc      config.HealthCheck
			target  netip.AddrPort
			timeout time.Duration
			ok      bool
			want    string
		}{
			{"expected reply", config.HealthCheck{Send: "ping", Expect: "pong to ping"}, pong, probeTimeout,
				true, "12-byte reply"},
			{"any reply", config.HealthCheck{Send: "ping"}, pong, probeTimeout, true, "12-byte reply"},
			{"unexpected reply", config.HealthCheck{Send: "ping", Expect: "ready"}, pong, probeTimeout,
				false, `reply "pong to ping" lacks "ready"`},
			{"no reply", config.HealthCheck{Send: "ping"}, silent, 50 * time.Millisecond,
				false, "timed out after 50ms"},
			{"closed port", config.HealthCheck{Send: "ping"}, closedPort(t, "udp", loopback), probeTimeout,
				false, "connection refused"},
			// Without a payload (keepalived's UDP_CHECK): silence is up, a port unreachable down.
			{"no payload, silence", config.HealthCheck{}, silent, 50 * time.Millisecond,
				true, "no port unreachable within the timeout"},
			{"no payload, reply", config.HealthCheck{}, pong, probeTimeout, true, "8-byte reply"},
			{"no payload, closed port", config.HealthCheck{}, closedPort(t, "udp", loopback), probeTimeout,
				false, "connection refused"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				tc.hc.Type = "udp"
				wantResult(t, check(t, tc.hc, tc.target, tc.timeout), tc.ok, tc.want)
			})
		}
	})
}
