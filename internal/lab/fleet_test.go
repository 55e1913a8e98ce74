package lab

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/sluicelb/sluice/internal/testutil"
)

// fleetLabKind names TestFleet's lab after the test process, like testLabKind.
const fleetLabKind = "sltestfleet"

func TestFleetPlan(t *testing.T) {
	l := New("x", 3)
	l.Balancers = 3
	if err := l.validate(); err != nil {
		t.Fatal(err)
	}
	wantNS := []string{"x-client", "x-router", "x-sw", "x-lb1", "x-lb2", "x-lb3", "x-b1", "x-b2", "x-b3"}
	if got := l.Namespaces(); !slices.Equal(got, wantNS) {
		t.Fatalf("namespaces %v, want %v", got, wantNS)
	}
	if l.BalancerNS() != "x-lb1" || l.BalancerNSOf(3) != "x-lb3" || New("x", 3).BalancerNSOf(1) != "x-lb" {
		t.Error("balancer namespace names")
	}
	for _, c := range []struct {
		got  netip.Addr
		want string
	}{
		{l.RouterFrontAddr(false), "10.91.3.1"},
		{l.RouterFrontAddr(true), "fd00:91:3::1"},
		{l.BalancerFrontAddr(1, false), "10.91.3.11"},
		{l.BalancerFrontAddr(3, true), "fd00:91:3::13"},
		{l.BalancerBackSideAddr(2, false), "10.91.2.202"},
		{l.BalancerBackSideAddr(2, true), "fd00:91:2::202"},
	} {
		if c.got.String() != c.want {
			t.Errorf("got %s, want %s", c.got, c.want)
		}
	}
	if l.BalancerFrontAddr(4, false).IsValid() || l.BalancerBackSideAddr(0, true).IsValid() {
		t.Error("out-of-range balancer address should be invalid")
	}

	big := New("x", MaxBackends)
	big.Balancers = MaxBalancers
	requireDistinctAddressesAndNames(t, big)
	conf := big.birdConf()
	for i := 1; i <= MaxBalancers; i++ {
		for _, want := range []string{
			fmt.Sprintf("protocol bgp lb%d_v4 from balancer", i),
			fmt.Sprintf("neighbor 10.91.3.%d as %d;", 10+i, BalancerASN),
			fmt.Sprintf("protocol bgp lb%d_v6 from balancer", i),
			fmt.Sprintf("neighbor fd00:91:3::%d as %d;", 10+i, BalancerASN),
		} {
			if !strings.Contains(conf, want) {
				t.Errorf("bird.conf lacks %q", want)
			}
		}
	}

	for _, n := range []int{0, -1, MaxBalancers + 1} {
		bad := New("ok", 1)
		bad.Balancers = n
		if err := bad.validate(); err == nil || !strings.Contains(err.Error(), "balancers") {
			t.Errorf("balancers %d: %v, want an error naming balancers", n, err)
		}
	}
}

func TestFleetStamp(t *testing.T) {
	l := New("x", 3)
	l.StateDir = t.TempDir()
	for _, balancers := range []int{1, 2, MaxBalancers} {
		l.Balancers = balancers
		if err := os.WriteFile(l.stampPath(), l.stamp(), 0o644); err != nil {
			t.Fatal(err)
		}
		if b, n := l.builtShape(); b != 3 || n != balancers {
			t.Errorf("stamp %q read back as %d backends, %d balancers", l.stamp(), b, n)
		}
	}
	l.Balancers = 1
	if got := string(l.stamp()); got != "sluice-lab v2 backends=3\n" {
		t.Errorf("one-balancer stamp changed: %q", got)
	}
}

func needFleetTools(t *testing.T) {
	t.Helper()
	needRoot(t)
	for _, bin := range []string{"bird", "birdc", "keepalived"} {
		if _, err := sbinPath(bin); err != nil {
			testutil.Missing(t, "needs %s: %v", bin, err)
		}
	}
}

// TestFleet builds a two-balancer lab, runs a BIRD in each balancer as a stand-in BGP speaker
// announcing VIP4 and VIP6, and checks the router's ECMP routes, a cut and a restored balancer,
// static VIP routes across a BIRD restart, and keepalived failover.
func TestFleet(t *testing.T) {
	needFleetTools(t)
	l := New(RunPrefix(fleetLabKind, os.Getpid()), 2)
	l.Balancers = 2
	ctx := t.Context()
	rootBefore, st1, st2 := upTwice(t, l)
	if !st2.Ready() || st2.Router == nil || st2.Router.BirdPID != st1.Router.BirdPID || len(st2.Balancers) != 2 {
		t.Fatalf("second Up changed a ready fleet:\n%s\n%s", st1, st2)
	}
	t.Logf("\n%s", st2)
	if other := status(t, New(l.Prefix, 1)); other.Router == nil || len(other.Balancers) != 2 {
		t.Errorf("status with another balancer count should describe the built fleet:\n%s", other)
	}

	t.Run("bird answers with its sessions", func(t *testing.T) {
		out, err := l.Birdc(ctx, "show", "protocols")
		if err != nil {
			t.Fatal(err)
		}
		var bgp []string
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[1] == "BGP" {
				bgp = append(bgp, f[0])
			}
		}
		if want := []string{"lb1_v4", "lb1_v6", "lb2_v4", "lb2_v6"}; !slices.Equal(bgp, want) {
			t.Errorf("BGP protocols %v, want %v:\n%s", bgp, want, out)
		}
	})

	t.Run("reachability", func(t *testing.T) {
		for _, v6 := range []bool{false, true} {
			ping(t, l, l.ClientNS(), l.BalancerClientSideAddr(v6))
			for i := 1; i <= l.Balancers; i++ {
				ping(t, l, l.RouterNS(), l.BalancerFrontAddr(i, v6))
				ping(t, l, l.BalancerNSOf(i), l.BackendAddr(1, v6))
			}
			ping(t, l, l.RouterNS(), l.BackendAddr(2, v6))
			if out := curl(t, l, "http://"+netip.AddrPortFrom(l.BackendAddr(2, v6), 80).String()+"/"); out != "b2\n" {
				t.Errorf("client to b2 through the router: %q", out)
			}
		}
	})

	vip4 := netip.PrefixFrom(netip.MustParseAddr(VIP4), 32)
	vip6 := netip.PrefixFrom(netip.MustParseAddr(VIP6), 128)
	both4 := []netip.Addr{l.BalancerFrontAddr(1, false), l.BalancerFrontAddr(2, false)}
	both6 := []netip.Addr{l.BalancerFrontAddr(1, true), l.BalancerFrontAddr(2, true)}
	if hops := nextHops(t, l, vip4); len(hops) != 0 {
		t.Fatalf("the router routes %s before any balancer announced it: %v", vip4, hops)
	}
	for i := 1; i <= l.Balancers; i++ {
		startSpeaker(t, l, i)
	}

	t.Run("ecmp over both balancers", func(t *testing.T) {
		waitNextHops(t, l, vip4, both4)
		waitNextHops(t, l, vip6, both6)
	})

	t.Run("cut and restore a balancer", func(t *testing.T) {
		if err := l.CutBalancer(1); err != nil {
			t.Fatal(err)
		}
		defer l.RestoreBalancer(1) // even if a wait fails: Up would rebuild a lab with ports down
		waitNextHops(t, l, vip4, both4[1:])
		waitNextHops(t, l, vip6, both6[1:])
		if err := l.RestoreBalancer(1); err != nil {
			t.Fatal(err)
		}
		waitNextHops(t, l, vip4, both4)
		waitNextHops(t, l, vip6, both6)
		if err := l.CutBalancer(9); err == nil {
			t.Error("cutting balancer 9: no error")
		}
	})

	t.Run("static vip routes outlive a bird restart", func(t *testing.T) {
		net4, net6 := netip.MustParsePrefix(VIPNet4), netip.MustParsePrefix(VIPNet6)
		gw4, gw6 := l.BalancerFrontAddr(2, false), l.BalancerFrontAddr(2, true)
		if err := l.RouteVIPsVia(gw4, gw6); err != nil {
			t.Fatal(err)
		}
		if err := l.RouteVIPsVia(gw6, netip.Addr{}); err == nil {
			t.Error("an IPv6 gateway for VIPNet4: no error")
		}
		if err := l.stopBird(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l.Up(ctx); err != nil {
			t.Fatal(err)
		}
		if st := status(t, l); !st.Ready() || st.Router.BirdPID == st2.Router.BirdPID {
			t.Errorf("Up did not restart bird:\n%s", st)
		}
		if got := nextHops(t, l, net4); !slices.Equal(got, []netip.Addr{gw4}) {
			t.Errorf("%s via %v, want %s", net4, got, gw4)
		}
		if got := nextHops(t, l, net6); !slices.Equal(got, []netip.Addr{gw6}) {
			t.Errorf("%s via %v, want %s", net6, got, gw6)
		}
		waitNextHops(t, l, vip4, both4)
	})

	t.Run("keepalived moves the vrrp address", func(t *testing.T) {
		hostPid, _ := os.ReadFile("/run/keepalived.pid")
		vrrpAddr := netip.MustParsePrefix("10.91.3.100/24")
		bad := "vrrp_instance VI_1 {\n\tinterface eth0\n\tbogus_keyword 1\n}\n"
		if err := l.StartKeepalived(ctx, 1, bad); err == nil || !strings.Contains(err.Error(), "Line 3") {
			t.Errorf("bad config: %v, want an error naming line 3", err)
		}
		if pid := l.keepalivedPid(1); pid != 0 {
			t.Fatalf("keepalived runs (pid %d) after a refused config", pid)
		}
		for i := 1; i <= l.Balancers; i++ {
			if err := l.StartKeepalived(ctx, i, vrrpConf(100+i, vrrpAddr)); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.StartKeepalived(ctx, 1, vrrpConf(101, vrrpAddr)); err == nil {
			t.Error("a second keepalived on balancer 1: no error")
		}
		master := waitVRRPMaster(t, l, vrrpAddr, 0)
		t.Logf("balancer %d is master", master)
		if err := l.KillKeepalived(master); err != nil {
			t.Fatal(err)
		}
		backup := waitVRRPMaster(t, l, vrrpAddr, master)
		if err := l.StopKeepalived(backup); err != nil {
			t.Fatal(err)
		}
		if slices.Contains(addrsOn(t, l, backup), vrrpAddr) {
			t.Error("a stopped keepalived left its address")
		}
		if err := l.StopKeepalived(backup); err != nil {
			t.Errorf("second stop: %v", err)
		}
		if err := l.KillKeepalived(backup); err == nil {
			t.Error("killing a stopped keepalived: no error")
		}
		if err := l.StartKeepalived(ctx, backup, vrrpConf(100, vrrpAddr)); err != nil {
			t.Fatal(err)
		}
		if after, _ := os.ReadFile("/run/keepalived.pid"); !bytes.Equal(after, hostPid) {
			t.Errorf("/run/keepalived.pid changed: %q -> %q", hostPid, after)
		}
		t.Logf("\n%s", status(t, l))
	})

	t.Run("down removes everything", func(t *testing.T) {
		st := status(t, l)
		if err := l.Down(ctx); err != nil {
			t.Fatal(err)
		}
		pids := []int{st.Router.BirdPID}
		for _, b := range st.Balancers {
			pids = append(pids, b.KeepalivedPID)
		}
		requireNothingLeft(t, l, rootBefore, pids)
	})
}

// ping sends ICMP echo requests from namespace ns until to answers (up to 5 tries).
func ping(t *testing.T, l *Lab, ns string, to netip.Addr) {
	t.Helper()
	network, listen, proto, typ := "ip4:icmp", "0.0.0.0", 1, icmp.Type(ipv4.ICMPTypeEcho)
	if to.Is6() {
		network, listen, proto, typ = "ip6:ipv6-icmp", "::", 58, ipv6.ICMPTypeEchoRequest
	}
	var c *icmp.PacketConn
	if err := l.Do(ns, func() (err error) {
		c, err = icmp.ListenPacket(network, listen)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	id := os.Getpid() & 0xffff
	buf := make([]byte, 1500)
	for seq := 1; seq <= 5; seq++ {
		req, err := (&icmp.Message{Type: typ, Body: &icmp.Echo{ID: id, Seq: seq, Data: []byte("sluice")}}).Marshal(nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.WriteTo(req, &net.IPAddr{IP: to.AsSlice()}); err != nil {
			t.Fatalf("ping %s from %s: %v", to, ns, err)
		}
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				break
			}
			m, err := icmp.ParseMessage(proto, buf[:n])
			if echo, ok := m.Body.(*icmp.Echo); err == nil && ok && echo.ID == id && from.String() == to.String() &&
				(m.Type == ipv4.ICMPTypeEchoReply || m.Type == ipv6.ICMPTypeEchoReply) {
				return
			}
		}
	}
	t.Errorf("ping %s from %s: no reply", to, ns)
}

// speakerConf is a balancer's stand-in BGP speaker: a BIRD that announces VIP4 and VIP6 to the
// router with a 3 s hold time, and retries a failed session after a second.
const speakerConf = `log stderr all;
router id {{front4}};
protocol device {
}
protocol static vip4 { ipv4; route {{vip4}}/32 blackhole; }
protocol static vip6 { ipv6; route {{vip6}}/128 blackhole; }
template bgp upstream {
	hold time 3;
	keepalive time 1;
	connect retry time 1;
	error wait time 1, 5;
	graceful restart off;
}
protocol bgp r4 from upstream {
	local {{front4}} as {{local_as}};
	neighbor {{router4}} as {{peer_as}};
	ipv4 { import none; export all; };
}
protocol bgp r6 from upstream {
	local {{front6}} as {{local_as}};
	neighbor {{router6}} as {{peer_as}};
	ipv6 { import none; export all; };
}
`

// startSpeaker runs the stand-in BGP speaker in balancer i until its namespace goes (Down).
func startSpeaker(t *testing.T, l *Lab, i int) {
	t.Helper()
	bin, err := sbinPath("bird")
	if err != nil {
		t.Fatal(err)
	}
	dir := l.balancerDir(i)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := strings.NewReplacer(
		"{{front4}}", l.BalancerFrontAddr(i, false).String(), "{{front6}}", l.BalancerFrontAddr(i, true).String(),
		"{{router4}}", l.RouterFrontAddr(false).String(), "{{router6}}", l.RouterFrontAddr(true).String(),
		"{{vip4}}", VIP4, "{{vip6}}", VIP6,
		"{{local_as}}", fmt.Sprint(BalancerASN), "{{peer_as}}", fmt.Sprint(RouterASN),
	).Replace(speakerConf)
	confPath := filepath.Join(dir, "speaker.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	argv := []string{bin, "-f", "-c", confPath, "-s", filepath.Join(dir, "speaker.ctl")}
	if _, _, err := l.startDetached(l.BalancerNSOf(i), argv, filepath.Join(dir, "speaker.log")); err != nil {
		t.Fatal(err)
	}
}

func nextHops(t *testing.T, l *Lab, p netip.Prefix) []netip.Addr {
	t.Helper()
	hops, err := l.RouterNextHops(p)
	if err != nil {
		t.Fatal(err)
	}
	return hops
}

// waitNextHops waits (up to a minute: a BGP hold time and reconnection) for the router's route
// to p to have exactly want as next hops.
func waitNextHops(t *testing.T, l *Lab, p netip.Prefix, want []netip.Addr) {
	t.Helper()
	var got []netip.Addr
	if !waitUntil(t, func() bool { got = nextHops(t, l, p); return slices.Equal(got, want) }) {
		t.Fatalf("router route %s via %v, want %v\n%s", p, got, want, birdRoutes(t, l))
	}
}

func birdRoutes(t *testing.T, l *Lab) string {
	out, err := l.Birdc(t.Context(), "show", "route", "all")
	if err != nil {
		return err.Error()
	}
	return out
}

// waitUntil polls cond for up to a minute.
func waitUntil(t *testing.T, cond func() bool) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
	return true
}

func vrrpConf(priority int, addr netip.Prefix) string {
	return fmt.Sprintf(`vrrp_instance front {
	state BACKUP
	interface eth0
	virtual_router_id 91
	priority %d
	advert_int 1
	virtual_ipaddress {
		%s dev eth0
	}
}
`, priority, addr)
}

// addrsOn lists the addresses on balancer i's eth0.
func addrsOn(t *testing.T, l *Lab, i int) []netip.Prefix {
	t.Helper()
	addrs, err := nsAddrs(l.BalancerNSOf(i))
	if err != nil {
		t.Fatal(err)
	}
	var out []netip.Prefix
	for _, a := range addrs {
		if a.Dev == "eth0" {
			out = append(out, a.Prefix)
		}
	}
	return out
}

// waitVRRPMaster waits until one balancer other than skip (0: none) holds addr, and returns it.
func waitVRRPMaster(t *testing.T, l *Lab, addr netip.Prefix, skip int) int {
	t.Helper()
	master := 0
	ok := waitUntil(t, func() bool {
		var holders []int
		for i := 1; i <= l.Balancers; i++ {
			if i != skip && slices.Contains(addrsOn(t, l, i), addr) {
				holders = append(holders, i)
			}
		}
		if len(holders) == 1 {
			master = holders[0]
		}
		return master != 0
	})
	if !ok {
		for i := 1; i <= l.Balancers; i++ {
			b, _ := os.ReadFile(l.keepalivedLogPath(i))
			t.Logf("balancer %d keepalived log:\n%s", i, b)
		}
		t.Fatalf("no single balancer (other than %d) holds %s", skip, addr)
	}
	return master
}
