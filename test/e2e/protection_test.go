package e2e

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"
)

// refusedDial bounds a connection attempt the balancer is expected to drop.
const refusedDial = 700 * time.Millisecond

// TestProtection runs the access lists and limits with the lab's client, on each datapath
// flavor that programs them: a denied or not-allowed client opens nothing, a client within
// its limits is served and one over them is reset, and established connections are never
// cut by a limit.
func TestProtection(t *testing.T) {
	requireLab(t)
	forEveryFlavor(t, func(t *testing.T, f Flavor) {
		t.Run("source-lists", func(t *testing.T) { testSourceLists(t, f) })
		t.Run("limits", func(t *testing.T) { testLimits(t, f) })
	})
}

// dialOnce opens one connection to the service and says whether it was accepted, refused (a
// reset) or dropped (no answer within refusedDial).
func dialOnce(t *testing.T, to netip.AddrPort) string {
	t.Helper()
	var outcome string
	err := inClient(func() error {
		c, err := (&net.Dialer{Timeout: refusedDial}).Dial("tcp", to.String())
		switch {
		case err == nil:
			c.Close()
			outcome = "accepted"
		case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
			// A reset, or on ebpf, where "reset" leaves the SYN to the balancer's stack, the
			// stack's answer: an ICMP unreachable when the VIP is not one of its addresses.
			outcome = "refused"
		case errors.Is(err, syscall.ETIMEDOUT) || isTimeout(err):
			outcome = "dropped"
		default:
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return outcome
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func testSourceLists(t *testing.T, f Flavor) {
	client := theLab.ClientAddr(false)
	own := netip.PrefixFrom(client, 24).Masked().String()
	other := "192.0.2.0/24"
	for _, c := range []struct {
		lists []string
		want  string
	}{
		{[]string{"source_allow: [" + own + "]"}, "accepted"},
		{[]string{"source_allow: [" + other + "]"}, "dropped"},
		{[]string{"source_deny: [" + client.String() + "]"}, "dropped"},
		{[]string{"source_allow: [" + own + "]", "source_deny: [" + other + "]"}, "accepted"},
		{[]string{"source_allow: [" + own + "]", "source_deny: [" + own + "]"}, "dropped"},
	} {
		svc := webService("maglev", equalPool(false))
		svc.Extra = c.lists
		apply(t, f.Config(svc))
		if got := dialOnce(t, svc.Addr()); got != c.want {
			t.Errorf("%v: client %s %s, want %s", c.lists, client, got, c.want)
		}
	}
}

func testLimits(t *testing.T, f Flavor) {
	if f.Datapath == "nft" && f.Mode == "dsr" {
		t.Run("connections-refused", func(t *testing.T) {
			svc := webService("maglev", equalPool(false))
			svc.Extra = []string{"limits: {connections_per_source: 2}"}
			requireRefused(t, f.Config(svc), "dsr has no conntrack")
		})
		testRateLimit(t, f)
		return
	}
	svc := webService("maglev", equalPool(false))
	svc.Extra = []string{"limits: {connections_per_source: 2}", "limit_action: reset"}
	applyFresh(t, f.Config(svc))
	held := []*keepAlive{dialKeepAlive(t, svc.Addr()), dialKeepAlive(t, svc.Addr())}
	for _, k := range held {
		if _, err := k.get(); err != nil {
			t.Fatal(err)
		}
	}
	if got := dialOnce(t, svc.Addr()); got != "refused" {
		t.Fatalf("a third connection of a client with connections_per_source 2: %s, want refused", got)
	}
	// A tighter limit applied while they are open does not cut them.
	svc.Extra = []string{"limits: {connections_per_source: 1}", "limit_action: reset"}
	apply(t, f.Config(svc))
	for i, k := range held {
		if _, err := k.get(); err != nil {
			t.Fatalf("held connection %d after the limit shrank: %v", i, err)
		}
	}
	held[0].c.Close()
	held[1].c.Close()
	// Closed, they leave the count: the client may open one again.
	if got := eventually(t, func() string { return dialOnce(t, svc.Addr()) }, "accepted"); got != "accepted" {
		t.Fatalf("after closing its connections the client's new one was %s", got)
	}

	testRateLimit(t, f)
}

// testRateLimit: new_connections_per_second 5 admits a burst of 5 of 30 quick connections, and
// the rate for the time they took.
func testRateLimit(t *testing.T, f Flavor) {
	svc := webService("maglev", equalPool(false))
	svc.Extra = []string{"limits: {new_connections_per_second: 5}", "limit_action: reset"}
	applyFresh(t, f.Config(svc))
	start := time.Now()
	accepted := 0
	for range 30 {
		if dialOnce(t, svc.Addr()) == "accepted" {
			accepted++
		}
	}
	refill := 5 * (int(time.Since(start)/time.Second) + 1)
	t.Logf("new_connections_per_second 5: %d of 30 connections accepted in %s", accepted, time.Since(start).Round(time.Millisecond))
	if accepted < 5 || accepted > 5+refill {
		t.Fatalf("%d of 30 connections accepted, want 5 (+%d for the time taken)", accepted, refill)
	}
}

// eventually retries fn for a few seconds until it returns want, and returns its last result.
func eventually(t *testing.T, fn func() string, want string) string {
	t.Helper()
	var got string
	for range 20 {
		if got = fn(); got == want {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return got
}
