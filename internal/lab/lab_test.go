package lab

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/sluicelb/sluice/internal/state"
	"github.com/sluicelb/sluice/internal/testutil"
)

// The test binary doubles as the lab's UDP responder (see TestMain).
var udpReply = flag.String("sluice.lab.udp-reply", "", "internal: serve UDP :5353 answering this name")

func TestMain(m *testing.M) {
	flag.Parse()
	if *udpReply != "" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		err := ServeUDP(ctx, ":5353", []byte(*udpReply+"\n"))
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Geteuid() == 0 {
		logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "lab test: "+format+"\n", args...) }
		if err := TearDownGone(context.Background(), logf, testLabKind, fleetLabKind, routedLabKind); err != nil {
			logf("tearing down the labs of earlier runs: %v", err)
		}
	}
	os.Exit(m.Run())
}

// testLabKind names TestLab's lab after the test process (see RunPrefix): concurrent runs each
// build their own, and one left by a run that timed out is torn down by the next run.
const testLabKind = "sltest"

func TestNewDefaultsAndAddresses(t *testing.T) {
	l := New("", 3)
	if l.Prefix != "sluice" || l.Backends != 3 || l.StateDir != "/run/sluice-lab/sluice" {
		t.Fatalf("defaults: %+v", l)
	}
	if err := l.validate(); err != nil {
		t.Fatal(err)
	}
	wantNS := []string{"sluice-client", "sluice-lb", "sluice-sw", "sluice-b1", "sluice-b2", "sluice-b3"}
	if got := l.Namespaces(); !slices.Equal(got, wantNS) {
		t.Fatalf("namespaces %v, want %v", got, wantNS)
	}
	if l.BackendNS(2) != "sluice-b2" || l.ClientNS() != "sluice-client" || l.BalancerNS() != "sluice-lb" {
		t.Fatal("namespace names")
	}
	for _, c := range []struct {
		got  netip.Addr
		want string
	}{
		{l.BackendAddr(1, false), "10.91.2.11"},
		{l.BackendAddr(3, false), "10.91.2.13"},
		{l.BackendAddr(2, true), "fd00:91:2::12"},
		{l.BalancerBackendSideAddr(false), "10.91.2.1"},
		{l.BalancerBackendSideAddr(true), "fd00:91:2::1"},
		{l.BalancerClientSideAddr(false), "10.91.1.1"},
		{l.ClientAddr(true), "fd00:91:1::2"},
		{l.ClientBypassAddr(false), "10.91.2.2"},
	} {
		if c.got.String() != c.want {
			t.Errorf("got %s, want %s", c.got, c.want)
		}
	}
	if l.BackendAddr(0, false).IsValid() || l.BackendAddr(4, true).IsValid() {
		t.Error("out-of-range backend address should be invalid")
	}
	if !netip.MustParsePrefix(VIPNet4).Contains(netip.MustParseAddr(VIP4)) ||
		!netip.MustParsePrefix(VIPNet6).Contains(netip.MustParseAddr(VIP6)) {
		t.Error("demo VIPs outside the VIP ranges")
	}
}

func TestTopologyPlan(t *testing.T) {
	requireDistinctAddressesAndNames(t, New("x", MaxBackends))
	for _, bad := range []*Lab{
		{Prefix: "", Backends: 1, StateDir: "/x"},
		{Prefix: "a/b", Backends: 1, StateDir: "/x"},
		{Prefix: "ok", Backends: 0, StateDir: "/x"},
		{Prefix: "ok", Backends: MaxBackends + 1, StateDir: "/x"},
		{Prefix: "ok", Backends: 1, StateDir: "rel"},
		New("ok", 0), // sluice-lab up --backends 0 made 3
	} {
		if bad.validate() == nil {
			t.Errorf("validate(%+v) = nil, want error", bad)
		}
	}
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.Missing(t, "needs root: creates network namespaces")
	}
	for _, bin := range []string{"ip", "curl"} {
		if _, err := exec.LookPath(bin); err != nil {
			testutil.Missing(t, "needs %s: %v", bin, err)
		}
	}
	if _, err := NginxPath(); err != nil {
		testutil.Missing(t, "needs nginx: %v", err)
	}
}

func TestLab(t *testing.T) {
	needRoot(t)
	l := New(RunPrefix(testLabKind, os.Getpid()), 3)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	l.UDPResponderCmd = func(reply string) []string { return []string{exe, "-sluice.lab.udp-reply=" + reply} }
	ctx := t.Context()
	rootBefore, st1, st2 := upTwice(t, l)
	if !st2.Ready() || !slices.Equal(st1.Backends, st2.Backends) {
		t.Fatalf("second Up changed a ready lab:\n%s\n%s", st1, st2)
	}
	t.Logf("\n%s", st2)
	if other := status(t, New(l.Prefix, 1)); !slices.Equal(other.Backends, st2.Backends) {
		t.Errorf("status with another backend count should describe the built lab:\n%s", other)
	}
	if after := rootLinks(t); !slices.Equal(rootBefore, after) {
		t.Fatalf("root namespace links changed:\nbefore %v\nafter  %v", rootBefore, after)
	}

	t.Run("backends over v4 and v6", func(t *testing.T) {
		for i := 1; i <= l.Backends; i++ {
			for _, v6 := range []bool{false, true} {
				out := curl(t, l, "-i", "http://"+netip.AddrPortFrom(l.BackendAddr(i, v6), 80).String()+"/")
				if !strings.HasSuffix(out, "\r\n\r\n"+BackendName(i)+"\n") || !strings.Contains(out, "X-Backend: "+BackendName(i)) {
					t.Errorf("backend %d v6=%v: %q", i, v6, out)
				}
			}
		}
	})

	t.Run("traffic goes through the balancer", func(t *testing.T) {
		before := linkStats(t, l.BalancerNS(), "eth0").RxPackets
		curl(t, l, "http://10.91.2.11/")
		if after := linkStats(t, l.BalancerNS(), "eth0").RxPackets; after <= before {
			t.Errorf("lb eth0 rx packets %d -> %d", before, after)
		}
		setSysctl(t, l.BalancerNS(), "net.ipv4.ip_forward", "0")
		out, err := l.Exec(ctx, l.ClientNS(), "curl", "-sS", "--max-time", "1", "http://10.91.2.12/").CombinedOutput()
		setSysctl(t, l.BalancerNS(), "net.ipv4.ip_forward", "1")
		if err == nil {
			t.Errorf("backend reachable with forwarding off: %s", out)
		}
	})

	t.Run("the switch is plain layer 2", func(t *testing.T) {
		for _, table := range []string{"arptables", "iptables", "ip6tables"} {
			path := "/proc/sys/net/bridge/bridge-nf-call-" + table
			out, err := l.Exec(ctx, l.SwitchNS(), "cat", path).CombinedOutput()
			if err != nil && strings.Contains(string(out), "No such file") {
				t.Skip("no br_netfilter in this kernel")
			}
			if got := strings.TrimSpace(string(out)); err != nil || got != "0" {
				t.Errorf("%s in the switch: %q, %v", path, got, err)
			}
		}
	})

	t.Run("the client reuses TIME_WAIT ports and stamps on one clock", func(t *testing.T) {
		for _, s := range loadGeneratorTCP {
			out, err := l.Exec(ctx, l.ClientNS(), "cat", "/proc/sys/"+strings.ReplaceAll(s.key, ".", "/")).CombinedOutput()
			if got := strings.TrimSpace(string(out)); err != nil || got != s.value {
				t.Errorf("%s in the client: %q (%v), want %s", s.key, got, err, s.value)
			}
		}
	})

	t.Run("static files and status", func(t *testing.T) {
		if out := curl(t, l, "-o", "/dev/null", "-w", "%{size_download}", "http://10.91.2.12/640k"); out != "655360" {
			t.Errorf("/640k size %s", out)
		}
		if out := curl(t, l, "-o", "/dev/null", "-w", "%{size_download}", "http://[fd00:91:2::13]/64k"); out != "65536" {
			t.Errorf("/64k size %s", out)
		}
		if out := curl(t, l, "http://10.91.2.11/status"); !strings.Contains(out, "Active connections") {
			t.Errorf("/status: %q", out)
		}
	})

	t.Run("udp responders", func(t *testing.T) {
		for i := 1; i <= l.Backends; i++ {
			for _, v6 := range []bool{false, true} {
				if got := udpQuery(t, l, netip.AddrPortFrom(l.BackendAddr(i, v6), 5353)); got != BackendName(i)+"\n" {
					t.Errorf("backend %d v6=%v: %q", i, v6, got)
				}
			}
		}
	})

	// Route the VIPs to b1 at L3 (as DSR would) and check replies come from
	// the VIP straight to the client's bypass leg.
	t.Run("dsr return path", func(t *testing.T) {
		routeVIPsTo(t, l, 1)
		before := linkStats(t, l.ClientNS(), "byp0").RxPackets
		for _, vip := range []string{VIP4, VIP6} {
			addr := netip.MustParseAddr(vip)
			if out := curl(t, l, "http://"+netip.AddrPortFrom(addr, 80).String()+"/"); out != "b1\n" {
				t.Errorf("http to %s: %q", vip, out)
			}
			if got := udpQuery(t, l, netip.AddrPortFrom(addr, 5353)); got != "b1\n" {
				t.Errorf("udp to %s: %q", vip, got)
			}
		}
		// At least SYN-ACK, response and FIN per HTTP exchange plus one datagram per UDP query.
		if after := linkStats(t, l.ClientNS(), "byp0").RxPackets; after < before+8 {
			t.Errorf("client byp0 rx packets %d -> %d: replies did not bypass the balancer", before, after)
		}
	})

	t.Run("stop and start a backend", func(t *testing.T) {
		if err := l.StopBackend(ctx, 2); err != nil {
			t.Fatal(err)
		}
		if out, err := l.Exec(ctx, l.ClientNS(), "curl", "-sS", "--max-time", "2", "http://10.91.2.12/").CombinedOutput(); err == nil {
			t.Errorf("stopped backend answered: %s", out)
		}
		if st := status(t, l); st.Backends[1].NginxPID != 0 || st.Ready() {
			t.Errorf("status after stop:\n%s", st)
		}
		if err := l.StopBackend(ctx, 2); err != nil {
			t.Errorf("second stop: %v", err)
		}
		if err := l.StartBackend(ctx, 2); err != nil {
			t.Fatal(err)
		}
		if out := curl(t, l, "http://10.91.2.12/"); out != "b2\n" {
			t.Errorf("restarted backend: %q", out)
		}
	})

	t.Run("freeze and kill a backend", func(t *testing.T) {
		if err := l.FreezeBackend(ctx, 2); err != nil {
			t.Fatal(err)
		}
		// The frozen backend's kernel accepts the connection, and nobody reads the request.
		var c net.Conn
		err := l.Do(l.ClientNS(), func() (err error) {
			c, err = net.DialTimeout("tcp4", "10.91.2.12:80", 5*time.Second)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("GET / HTTP/1.0\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		if err := l.KillBackend(ctx, 2); err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("a request the killed backend had not read: %v, want a reset", err)
		}
		if st := status(t, l); st.Backends[1].NginxPID != 0 {
			t.Errorf("status after kill:\n%s", st)
		}
		if err := l.KillBackend(ctx, 2); err == nil {
			t.Error("killing a backend that is not running: no error")
		}
		if err := l.StartBackend(ctx, 2); err != nil {
			t.Fatal(err)
		}
		if out := curl(t, l, "http://10.91.2.12/"); out != "b2\n" {
			t.Errorf("restarted backend: %q", out)
		}
	})

	t.Run("up repairs a missing namespace", func(t *testing.T) {
		if err := deleteNS(l.BackendNS(3)); err != nil {
			t.Fatal(err)
		}
		if err := l.Up(ctx); err != nil {
			t.Fatal(err)
		}
		if st := status(t, l); !st.Ready() {
			t.Fatalf("not ready after repair:\n%s", st)
		}
		if out := curl(t, l, "http://10.91.2.13/"); out != "b3\n" {
			t.Errorf("b3 after repair: %q", out)
		}
	})

	t.Run("down removes everything", func(t *testing.T) {
		st := status(t, l)
		kept := filepath.Dir(state.NetnsPath(l.BalancerNS())) // as sluice --netns keeps its files
		if err := os.MkdirAll(kept, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(kept, "last-apply.gob"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := l.Down(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l.Down(ctx); err != nil {
			t.Fatalf("second Down: %v", err)
		}
		var pids []int
		for _, b := range st.Backends {
			pids = append(pids, b.NginxPID, b.UDPPID)
		}
		requireNothingLeft(t, l, rootBefore, pids)
		if _, err := os.Stat(kept); !os.IsNotExist(err) {
			t.Errorf("sluice's files of the balancer's namespace left in %s: %v", kept, err)
		}
	})
}

// upTwice brings l up twice, the second time over a ready lab, and tears it down when the test
// ends. It returns the root namespace's links from before and l's status after each Up.
func upTwice(t *testing.T, l *Lab) (rootBefore []string, first, second Status) {
	t.Helper()
	t.Cleanup(func() {
		if err := l.Down(context.Background()); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	rootBefore = rootLinks(t)
	if err := l.Up(t.Context()); err != nil {
		t.Fatalf("first Up: %v", err)
	}
	first = status(t, l)
	if err := l.Up(t.Context()); err != nil {
		t.Fatalf("second Up: %v", err)
	}
	return rootBefore, first, status(t, l)
}

// requireNothingLeft checks that a torn-down l left no namespace, state dir or process behind
// (pids were its daemons), and the root namespace's links as they were before (rootBefore).
func requireNothingLeft(t *testing.T, l *Lab, rootBefore []string, pids []int) {
	t.Helper()
	if names, err := l.labNamespaces(); err != nil || len(names) > 0 {
		t.Errorf("namespaces left: %v %v", names, err)
	}
	if _, err := os.Stat(l.StateDir); !os.IsNotExist(err) {
		t.Errorf("state dir left: %v", err)
	}
	for _, pid := range pids {
		if running(pid, "") {
			t.Errorf("pid %d still running", pid)
		}
	}
	if pids := pidsMentioning(t, l.StateDir); len(pids) > 0 {
		t.Errorf("processes mentioning %s: %v", l.StateDir, pids)
	}
	if after := rootLinks(t); !slices.Equal(rootBefore, after) {
		t.Errorf("root namespace links changed:\nbefore %v\nafter  %v", rootBefore, after)
	}
}

func status(t *testing.T, l *Lab) Status {
	t.Helper()
	st, err := l.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func curl(t *testing.T, l *Lab, args ...string) string {
	t.Helper()
	argv := append([]string{"curl", "-sS", "--max-time", "5"}, args...)
	out, err := l.Exec(t.Context(), l.ClientNS(), argv...).CombinedOutput()
	if err != nil {
		t.Errorf("%v: %v: %s", argv, err, out)
	}
	return string(out)
}

func setSysctl(t *testing.T, ns, key, value string) {
	t.Helper()
	if err := SetSysctl(ns, key, value); err != nil {
		t.Fatal(err)
	}
}

// udpQuery sends a datagram from the client namespace and returns the reply;
// the connected socket only accepts replies from the queried address.
func udpQuery(t *testing.T, l *Lab, to netip.AddrPort) string {
	t.Helper()
	var c *net.UDPConn
	if err := l.Do(l.ClientNS(), func() (err error) {
		c, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(to))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 512)
	for try := 0; try < 3; try++ {
		if _, err := c.Write([]byte("q")); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(time.Second))
		if n, err := c.Read(buf); err == nil {
			return string(buf[:n])
		}
	}
	t.Errorf("no UDP reply from %s", to)
	return ""
}

func linkStats(t *testing.T, ns, dev string) netlink.LinkStatistics {
	t.Helper()
	var stats netlink.LinkStatistics
	if err := WithHandle(ns, func(h *netlink.Handle) error {
		link, err := h.LinkByName(dev)
		if err == nil {
			stats = *link.Attrs().Statistics
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return stats
}

// routeVIPsTo routes both VIP ranges from the balancer to backend i until the test ends.
func routeVIPsTo(t *testing.T, l *Lab, i int) {
	t.Helper()
	var routes []*netlink.Route
	for _, v6 := range []bool{false, true} {
		dst := netip.MustParsePrefix(VIPNet4)
		if v6 {
			dst = netip.MustParsePrefix(VIPNet6)
		}
		routes = append(routes, &netlink.Route{Dst: ipNet(dst), Gw: l.BackendAddr(i, v6).AsSlice()})
	}
	err := WithHandle(l.BalancerNS(), func(h *netlink.Handle) error {
		for _, r := range routes {
			if err := h.RouteAdd(r); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = WithHandle(l.BalancerNS(), func(h *netlink.Handle) error {
			for _, r := range routes {
				_ = h.RouteDel(r)
			}
			return nil
		})
	})
}

// rootLinks lists the root namespace's links as sorted "index:name" strings.
func rootLinks(t *testing.T) []string {
	t.Helper()
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, link := range links {
		out = append(out, fmt.Sprintf("%d:%s", link.Attrs().Index, link.Attrs().Name))
	}
	slices.Sort(out)
	return out
}

// pidsMentioning lists live processes whose command line contains s.
func pidsMentioning(t *testing.T, s string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		if pid, ok := parsePid(e.Name()); ok && pid != os.Getpid() && running(pid, s) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// requireDistinctAddressesAndNames checks that no address is planned twice and that every
// namespace's interface names are distinct and fit the kernel's 15 bytes.
func requireDistinctAddressesAndNames(t *testing.T, l *Lab) {
	t.Helper()
	seen := map[netip.Addr]bool{}
	for _, a := range l.ifAddrs() {
		if seen[a.prefix.Addr()] {
			t.Errorf("duplicate address %s", a.prefix)
		}
		seen[a.prefix.Addr()] = true
	}
	for ns, devs := range l.links() {
		for _, dev := range devs {
			if len(dev) > 15 {
				t.Errorf("%s/%s: interface name too long", ns, dev)
			}
		}
		if sorted := slices.Sorted(slices.Values(devs)); len(slices.Compact(sorted)) != len(devs) {
			t.Errorf("%s: duplicate interface names %v", ns, devs)
		}
	}
}
