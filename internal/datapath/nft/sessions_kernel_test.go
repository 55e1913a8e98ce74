package nft

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/sluicelb/sluice/internal/plan"
)

// The session tests run real connections from several client addresses: three in 10.91.1.0/24
// and two in 10.91.4.0/24, all in the client namespace.
var (
	clients24a = []netip.Addr{netip.MustParseAddr("10.91.1.2"), netip.MustParseAddr("10.91.1.3"), netip.MustParseAddr("10.91.1.4")}
	clients24b = []netip.Addr{netip.MustParseAddr("10.91.4.2"), netip.MustParseAddr("10.91.4.3")}
)

// sessionRig builds natTopology with the client addresses above and a third backend, 10.91.2.13,
// each answering its own address on ports 80 and 81 (serveLocalAddr), and on port 82 each line
// of a connection that stays open (serveWhoAmI).
func sessionRig(t *testing.T) (client netns.NsHandle, d *Datapath) {
	t.Helper()
	client, backends := natTopology(t)
	in(t, client, func() {
		addAddrs(t, "client1", "10.91.1.3/24", "10.91.1.4/24", "10.91.4.2/24", "10.91.4.3/24")
	})
	client0, _ := netlink.LinkByName("client0")
	_, other, _ := net.ParseCIDR("10.91.4.0/24")
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: client0.Attrs().Index, Dst: other, Gw: net.ParseIP("10.91.1.2")}); err != nil {
		t.Fatal(err)
	}
	in(t, backends, func() {
		addAddrs(t, "veth1", "10.91.2.13/24")
		serveLocalAddr(t, ":80")
		serveLocalAddr(t, ":81")
		serveWhoAmI(t, ":82")
		serveLocalAddr(t, ":443")
	})
	return client, newTestDatapath(t)
}

func addAddrs(t *testing.T, link string, addrs ...string) {
	t.Helper()
	l, err := netlink.LinkByName(link)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		addr, _ := netlink.ParseAddr(a)
		if err := netlink.AddrAdd(l, addr); err != nil {
			t.Fatal(err)
		}
	}
}

// serveLocalAddr answers every connection on addr with the address it was accepted on (the
// backend the balancer chose) and closes it.
func serveLocalAddr(t *testing.T, addr string) {
	serveEach(listenTCP(t, addr), func(c net.Conn) {
		_, _ = io.WriteString(c, c.LocalAddr().(*net.TCPAddr).IP.String())
	})
}

// dialSrc connects from src (port 0: any) in ns to the service at to.
func dialSrc(t *testing.T, ns netns.NsHandle, src, to netip.AddrPort) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: echoTimeout, LocalAddr: net.TCPAddrFromAddrPort(src)}
	var c net.Conn
	var err error
	in(t, ns, func() { c, err = d.Dial("tcp4", to.String()) })
	if err != nil {
		t.Fatalf("%s -> %s: %v", src, to, err)
	}
	return c
}

// backendFor connects from src (port 0: any) to the service at to and returns the backend that
// answered.
func backendFor(t *testing.T, ns netns.NsHandle, src, to netip.AddrPort) netip.Addr {
	t.Helper()
	c := dialSrc(t, ns, src, to)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(echoTimeout))
	answer, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("%s -> %s: %v", src, to, err)
	}
	b, err := netip.ParseAddr(string(answer))
	if err != nil {
		t.Fatalf("%s -> %s: answered %q", src, to, answer)
	}
	return b
}

// sessionPlan is the plan of one tcp service web at 10.91.9.100 with the given settings (YAML
// lines of the service, and of the config before: top) over backends at their weights.
func sessionPlan(t *testing.T, top, settings string, backends ...weighted) *plan.Plan {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%s\nservices:\n  - name: web\n    vip: 10.91.9.100\n    protocol: tcp\n", top)
	for _, line := range strings.Split(strings.TrimSpace(settings), "\n") {
		fmt.Fprintf(&b, "    %s\n", strings.TrimSpace(line))
	}
	b.WriteString("    backends:\n")
	for _, w := range backends {
		fmt.Fprintf(&b, "      - address: %s\n        weight: %d\n", w.addr, w.weight)
	}
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return loadPlan(t, path)
}

// weighted is a backend of sessionPlan.
type weighted struct {
	addr   netip.Addr
	weight int
}

// rigBackends are the backends of sessionRig, weight 1 but drained (weight 0).
func rigBackends(drained netip.Addr) []weighted {
	var out []weighted
	for _, a := range []string{"10.91.2.11", "10.91.2.12", "10.91.2.13"} {
		w := weighted{netip.MustParseAddr(a), 1}
		if w.addr == drained {
			w.weight = 0
		}
		out = append(out, w)
	}
	return out
}

// assertRemembered checks that Which sends a new flow of client to the service web on port 80
// to the backend want, which persistence remembers for it.
func assertRemembered(t *testing.T, d *Datapath, client, want netip.Addr) {
	t.Helper()
	src := netip.AddrPortFrom(client, 45678) // a port none of the test's flows uses
	c, err := d.Which("tcp", netip.MustParseAddrPort("10.91.9.100:80"), src)
	if err != nil || c.Tracked || c.Backend.Addr() != want {
		t.Errorf("Which(%s) = %+v, %v; want %s, remembered", src, c, err, want)
	}
}

// TestKernelSHHashesTheClient: under sh, every connection of one client address lands on one
// backend whatever its source port, and on the backend Which predicts; with sh_port, the
// connections of one address spread over the backends (all 12 of each of 5 addresses on one of
// 3 equal backends: about 3^-55), still as Which predicts.
func TestKernelSHHashesTheClient(t *testing.T) {
	inFreshNetns(t, func() {
		client, d := sessionRig(t)
		vip := netip.MustParseAddrPort("10.91.9.100:80")
		for _, shPort := range []bool{false, true} {
			apply(t, d, sessionPlan(t, "", fmt.Sprintf("port: 80\nscheduler: sh\nsh_port: %v", shPort), rigBackends(netip.Addr{})...))
			spread, base := 0, 20000
			if shPort {
				base = 30000 // the first round's ports are still tracked (TIME_WAIT)
			}
			for _, addr := range append(clients24a, clients24b...) {
				seen := map[netip.Addr]bool{}
				for i := range 12 {
					src := netip.AddrPortFrom(addr, uint16(base+i*7))
					want, err := d.Which("tcp", vip, src)
					if err != nil || want.Tracked {
						t.Fatalf("Which(%s) = %+v, %v; want a new flow's backend", src, want, err)
					}
					got := backendFor(t, client, src, vip)
					if got != want.Backend.Addr() {
						t.Errorf("sh_port %v: %s landed on %s, Which said %s", shPort, src, got, want.Backend)
					}
					seen[got] = true
				}
				if !shPort && len(seen) != 1 {
					t.Errorf("sh: client %s reached %d backends, want 1", addr, len(seen))
				}
				if len(seen) > 1 {
					spread++
				}
			}
			if shPort && spread == 0 {
				t.Errorf("sh_port: every client address stayed on one backend")
			}
		}
	})
}

// TestKernelPersistenceKeepsTheClient: with persistence by /24 under rr (which alone would
// rotate every new flow), all connections of one /24, over many source ports and both ports of
// a range, land on one backend; once that backend is drained (weight 0), the next connection
// of the /24 is balanced anew and the later ones stick to that new backend, and another /24
// keeps its own backend.
func TestKernelPersistenceKeepsTheClient(t *testing.T) {
	// A port range, and a list of ports (an IPVS fwmark service): persistence spans the ports.
	for _, ports := range []struct {
		setting string
		port    [2]uint16
	}{{"port: 80-81", [2]uint16{80, 81}}, {"ports: [443, 80]", [2]uint16{80, 443}}} {
		for _, mode := range []string{"nat", "fullnat"} {
			t.Run(mode+"/"+ports.setting, func(t *testing.T) {
				testPersistenceKeepsTheClient(t, mode, ports.setting, ports.port)
			})
		}
	}
}

func testPersistenceKeepsTheClient(t *testing.T, mode, portSetting string, port [2]uint16) {
	inFreshNetns(t, func() {
		client, d := sessionRig(t)
		settings := portSetting + "\nmode: " + mode + "\nscheduler: rr\npersistence_timeout: 300s\npersistence_granularity: 24"
		apply(t, d, sessionPlan(t, "", settings, rigBackends(netip.Addr{})...))
		// sticky asks n connections from each client, alternating the service's ports, and
		// returns the one backend they all reached.
		sticky := func(clients []netip.Addr, n int) netip.Addr {
			t.Helper()
			var first netip.Addr
			for i := range n {
				for _, addr := range clients {
					to := netip.AddrPortFrom(netip.MustParseAddr("10.91.9.100"), port[i%2])
					got := backendFor(t, client, netip.AddrPortFrom(addr, 0), to)
					if !first.IsValid() {
						first = got
					} else if got != first {
						t.Fatalf("%s -> %s landed on %s, the /24 before on %s", addr, to, got, first)
					}
				}
			}
			return first
		}
		a := sticky(clients24a, 8)
		assertRemembered(t, d, clients24a[2], a)
		b := sticky(clients24b, 8)
		if again := sticky(clients24a[:1], 4); again != a {
			t.Fatalf("10.91.1.0/24 moved from %s to %s", a, again)
		}

		apply(t, d, sessionPlan(t, "", settings, rigBackends(a)...)) // a keeps its flows, takes no new one
		moved := sticky(clients24a, 8)
		if moved == a {
			t.Fatalf("10.91.1.0/24 still lands on drained %s", a)
		}
		assertRemembered(t, d, clients24a[2], moved)
		if b != a {
			if got := sticky(clients24b, 4); got != b {
				t.Errorf("10.91.4.0/24 moved from %s to %s when %s was drained", b, got, a)
			}
		}
	})
}

// TestKernelDSRPersistenceKeepsTheClient: under dsr with maglev, which alone spreads a client's
// connections by 5-tuple, persistence by address keeps every connection of a client on one
// backend; once that backend is drained, the client's next connection goes to the other one,
// and the later ones stick there.
func TestKernelDSRPersistenceKeepsTheClient(t *testing.T) {
	inFreshNetns(t, func() {
		vip := netip.AddrPortFrom(netip.MustParseAddr("10.91.9.100"), 80)
		client, backends, nss := dsrTopology(t, vip.Addr())
		byName := map[string]netip.Addr{}
		for i, ns := range nss {
			name := []string{"b11", "b12"}[i]
			in(t, ns, func() { go serveName(listenTCP(t, ":80"), name) })
			byName[name] = backends[i].Addr
		}
		in(t, client, func() { addAddrs(t, "client1", "10.91.1.3/24") })
		d := newTestDatapath(t)
		apply2 := func(drained netip.Addr) {
			var ws []weighted
			for _, b := range backends {
				ws = append(ws, weighted{b.Addr, map[bool]int{true: 0, false: 1}[b.Addr == drained]})
			}
			apply(t, d, sessionPlan(t, "interfaces: [client0]", "port: 80\nmode: dsr\npersistence_timeout: 300s", ws...))
		}
		// stuck opens n connections from src and returns the one backend they all reached.
		stuck := func(src netip.Addr, n int) netip.Addr {
			t.Helper()
			var first netip.Addr
			for range n {
				c := dialSrc(t, client, netip.AddrPortFrom(src, 0), vip)
				name, err := nameFrom(c)
				c.Close()
				if err != nil {
					t.Fatalf("%s -> %s: %v", src, vip, err)
				}
				if got := byName[name]; !first.IsValid() {
					first = got
				} else if got != first {
					t.Fatalf("%s landed on %s, before on %s", src, got, first)
				}
			}
			return first
		}
		apply2(netip.Addr{})
		a := stuck(clients24a[0], 12)
		stuck(clients24a[1], 12)
		apply2(a)
		moved := stuck(clients24a[0], 12)
		if moved == a {
			t.Fatalf("%s still lands on drained %s", clients24a[0], a)
		}
		assertRemembered(t, d, clients24a[0], moved)
	})
}

// TestKernelPortsWithoutPersistenceSpread: without persistence, one client's connections to the
// ports of a service on several ports spread over its backends (rr alternates), as IPVS spreads a
// fwmark service's without -p.
func TestKernelPortsWithoutPersistenceSpread(t *testing.T) {
	inFreshNetns(t, func() {
		client, d := sessionRig(t)
		apply(t, d, sessionPlan(t, "", "ports: [443, 80]\nmode: nat\nscheduler: rr", rigBackends(netip.Addr{})...))
		reached := map[netip.Addr]bool{}
		for i := range 4 {
			to := netip.AddrPortFrom(netip.MustParseAddr("10.91.9.100"), []uint16{80, 443}[i%2])
			reached[backendFor(t, client, netip.AddrPortFrom(clients24a[0], 0), to)] = true
		}
		if len(reached) < 2 {
			t.Errorf("one client's four connections to ports 80 and 443 reached %v, want them spread", reached)
		}
	})
}
