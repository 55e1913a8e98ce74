package nft

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/netnstest"
	"github.com/sluicelb/sluice/internal/plan"
	"github.com/sluicelb/sluice/internal/testutil"
)

// inFreshNetns runs fn on a thread switched into a new, empty network namespace holding one veth
// pair (10.91.2.1/24 on veth0), so that nft and the kernel see nothing but what the test makes.
func inFreshNetns(t testing.TB, fn func()) {
	if _, err := exec.LookPath("nft"); err != nil {
		testutil.Missing(t, "needs nft: %v", err)
	}
	netnstest.Run(t, func() {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "veth0"}, PeerName: "veth1"}
		if err := netlink.LinkAdd(veth); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"veth0", "veth1"} {
			l, _ := netlink.LinkByName(name)
			if err := netlink.LinkSetUp(l); err != nil {
				t.Fatal(err)
			}
		}
		for _, a := range []string{"10.91.2.1/24", "fd00:91:2::1/64"} {
			addr, _ := netlink.ParseAddr(a)
			addr.Flags = unix.IFA_F_NODAD // usable at once
			if err := netlink.AddrAdd(veth, addr); err != nil {
				t.Fatal(err)
			}
		}
		forward(t, "1") // a balancer forwards: Apply refuses nat and fullnat otherwise
		fn()
	})
}

// forward sets the calling thread's namespace's IPv4 and IPv6 forwarding to v ("0" or "1").
func forward(t testing.TB, v string) {
	t.Helper()
	for _, path := range []string{"/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv6/conf/all/forwarding"} {
		if err := os.WriteFile(path, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func loadPlan(t *testing.T, path string) *plan.Plan {
	t.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Build(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// pending is the number of operations Apply would still send for p: 0 when the kernel matches.
func pending(t *testing.T, d *Datapath, p *plan.Plan) int {
	t.Helper()
	env, err := hostEnvironment(p.Interfaces)
	if err != nil {
		t.Fatal(err)
	}
	want, err := render(p, env)
	if err != nil {
		t.Fatal(err)
	}
	have, err := d.read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return reconcile(d.nft.NewTransaction(), have, want)
}

// TestKernelAcceptsEveryCase applies every golden config and every transition to a real kernel:
// nft must accept each transaction, a second Apply must find nothing to do, Status must read the
// services back, and Flush must leave no table behind.
func TestKernelAcceptsEveryCase(t *testing.T) {
	v4 := []string{"dsr-range-udp", "dsr-tcp", "fallback", "nat-maglev", "nat-range-udp", "wrr-hash-random",
		"nat-sh", "nat-sh-port", "persistence-nat-v4", "persistence-dsr", "protection-nat", "protection-dsr", "nat-ports-persistence", "dsr-ports"}
	inFreshNetns(t, func() {
		ctx := context.Background()
		d := newTestDatapath(t)
		strictTCPTracking(t)
		var steps []string
		for _, c := range append(v4, "fullnat-v6-rr", "persistence-fullnat-v6", "protection-fullnat-v6", "fullnat-source", "dsr-v6") {
			steps = append(steps, filepath.Join("testdata/golden", c, "config.yaml"))
		}
		cases, _ := filepath.Glob("testdata/transitions/*")
		for _, c := range cases {
			steps = append(steps, filepath.Join(c, "before.yaml"), filepath.Join(c, "after.yaml"))
		}
		for _, step := range steps {
			p := loadPlan(t, step)
			if err := d.Apply(ctx, p); err != nil {
				t.Fatalf("%s: %v", step, err)
			}
			if n := pending(t, d, p); n != 0 {
				t.Fatalf("%s: kernel differs from the plan right after Apply (%d operations pending)", step, n)
			}
			status, err := d.readStatus(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if fast, err := d.Status(ctx); err != nil || !reflect.DeepEqual(fast, status) {
				t.Fatalf("%s: Status from what was committed and the kernel's counters:\n%+v (%v)\nread from the tables:\n%+v", step, fast, err, status)
			}
			if len(status) != len(p.Services) {
				t.Fatalf("%s: Status shows %d services, plan has %d", step, len(status), len(p.Services))
			}
			for i, s := range status {
				if s.Name != p.Services[i].Name || len(s.Backends) != len(p.Services[i].Backends) || s.Slots != len(p.Services[i].Slots) {
					t.Fatalf("%s: Status %+v does not match plan service %s", step, s, p.Services[i].String())
				}
				assertServiceStatus(t, d, s)
				assertServiceStatus(t, newTestDatapath(t), s) // nothing committed: read from the tables
			}
			if _, found, err := d.ServiceStatus(ctx, "absent"); found || err != nil {
				t.Fatalf("%s: ServiceStatus of a service not programmed: found %v, %v", step, found, err)
			}
		}
		if err := d.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if out, _ := exec.Command("nft", "list", "ruleset").Output(); len(out) != 0 {
			t.Fatalf("ruleset after Flush:\n%s", out)
		}
	})
}

// TestKernelApplyTrustsWhatItCommitted checks the cost of trusting the committed state and how it
// is bounded: a change made behind the datapath's back stays until Resync, and a transaction that
// fails because of one makes the next Apply read the kernel and succeed.
func TestKernelApplyTrustsWhatItCommitted(t *testing.T) {
	inFreshNetns(t, func() {
		d := newTestDatapath(t)
		both := loadPlan(t, "testdata/transitions/add-service/after.yaml") // dns and web
		webOnly := loadPlan(t, "testdata/transitions/add-service/before.yaml")
		apply(t, d, both)
		runNFT(t, "delete element inet sluice dispatch-port4 { udp . 10.91.9.100 . 53 }")
		apply(t, d, both)
		if n := pending(t, d, both); n != 1 {
			t.Fatalf("%d operations pending after a foreign deletion and an Apply without Resync, want the 1 it left", n)
		}
		d.Resync()
		apply(t, d, both)
		if n := pending(t, d, both); n != 0 {
			t.Fatalf("%d operations pending after Resync and Apply", n)
		}

		runNFT(t, "delete map inet sluice "+namesOf(&both.Services[0]).members)
		if err := d.Apply(context.Background(), webOnly); err == nil {
			t.Fatal("Apply deleting a map someone else deleted succeeded")
		}
		apply(t, d, webOnly)
		if n := pending(t, d, webOnly); n != 0 {
			t.Fatalf("%d operations pending after the Apply that followed a failed one", n)
		}
	})
}

// TestKernelResyncReadsTheTablesOnlyAfterAnotherTransaction: a Resync with no transaction since
// the last commit keeps what was committed (no service rendered again, no read of the tables);
// after anyone else's transaction, even in another table, the next Resync reads them and repairs
// what differs.
func TestKernelResyncReadsTheTablesOnlyAfterAnotherTransaction(t *testing.T) {
	inFreshNetns(t, func() {
		d := newTestDatapath(t)
		both := loadPlan(t, "testdata/transitions/add-service/after.yaml") // dns and web
		apply(t, d, both)
		if gen := rulesetGeneration(); gen == 0 || d.generation != gen {
			t.Fatalf("committed at generation %d, the ruleset is at %d", d.generation, gen)
		}
		web := d.committed.service("web")
		d.Resync()
		apply(t, d, both)
		if d.committed.service("web") != web {
			t.Fatal("a Resync with no other transaction since the commit rendered web again")
		}
		runNFT(t, "add table inet someone-else")
		runNFT(t, "delete element inet sluice dispatch-port4 { udp . 10.91.9.100 . 53 }")
		d.Resync()
		apply(t, d, both)
		if n := pending(t, d, both); n != 0 {
			t.Fatalf("%d operations pending after the Resync that followed another transaction", n)
		}
	})
}

// TestKernelOtherTablesAreNotSluices: an operator's tables beside Sluice's, with chains and sets
// of the same family (a firewall's `inet filter`, the sync guard's `inet sluice-sync`), are never
// read as Sluice's: the kernel does not filter chain dumps by table, and a resync once tried to
// flush their chains in Sluice's table.
func TestKernelOtherTablesAreNotSluices(t *testing.T) {
	inFreshNetns(t, func() {
		d := newTestDatapath(t)
		both := loadPlan(t, "testdata/transitions/add-service/after.yaml")
		runNFT(t, "add table inet sluice-sync")
		runNFT(t, "add chain inet sluice-sync input { type filter hook input priority 0; }")
		runNFT(t, "add table inet filter")
		runNFT(t, "add chain inet filter forward { type filter hook forward priority 0; }")
		runNFT(t, "add set inet filter blocked { type ipv4_addr; }")
		apply(t, d, both)
		d.Resync()
		apply(t, d, both)
		if n := pending(t, d, both); n != 0 {
			t.Fatalf("%d operations pending after a resync beside other tables", n)
		}
		runNFT(t, "list chain inet sluice-sync input")
		runNFT(t, "list set inet filter blocked")
	})
}

// runNFT runs one nft command in the test's namespace.
func runNFT(t *testing.T, command string) {
	t.Helper()
	if out, err := exec.Command("nft", command).CombinedOutput(); err != nil {
		t.Fatalf("nft %s: %v: %s", command, err, out)
	}
}

var (
	backend11 = netip.MustParseAddr("10.91.2.11")
	backend12 = netip.MustParseAddr("10.91.2.12")
)

// newTestDatapath returns a datapath for the test's namespace; its tables go with the namespace.
func newTestDatapath(t *testing.T) *Datapath {
	t.Helper()
	d, err := New(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// twoBackendPlan balances every service (given in name order) over backends 10.91.2.11 and
// 10.91.2.12, new flows going to the one at index to (the other has weight 0 and keeps its
// established flows).
func twoBackendPlan(mode string, to int, services ...plan.Service) *plan.Plan {
	p := &plan.Plan{Datapath: "nft"}
	for _, s := range services {
		s.Mode, s.Scheduler, s.Fallback, s.FlowTimeout = config.Mode(mode), "rr", "drop", config.DefaultFlowTimeout
		s.Backends = []plan.Backend{{Addr: backend11}, {Addr: backend12}}
		s.Backends[to].Weight = 1
		s.Slots = []int{to}
		p.Services = append(p.Services, s)
	}
	return p
}

func service(name, proto, vip string, first, last int) plan.Service {
	return plan.Service{Name: name, Protocol: config.Protocol(proto), VIP: netip.MustParseAddr(vip), Ports: config.PortList{{First: first, Last: last}}}
}

func apply(t *testing.T, d *Datapath, p *plan.Plan) {
	t.Helper()
	if err := d.Apply(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}

// assertServiceStatus checks that ServiceStatus reads want's service as it was read from the tables.
func assertServiceStatus(t *testing.T, d *Datapath, want datapath.ServiceStatus) {
	t.Helper()
	got, found, err := d.ServiceStatus(context.Background(), want.Name)
	if err != nil || !found || !reflect.DeepEqual(got, want) {
		t.Fatalf("ServiceStatus(%s) = %+v, %v, %v; read from the tables: %+v", want.Name, got, found, err, want)
	}
}

// backendsOf returns the status of each backend of a service, by address, read by ServiceStatus
// (TestKernelAcceptsEveryCase checks that it reads what Status does).
func backendsOf(t *testing.T, d *Datapath, name string) map[string]datapath.BackendStatus {
	t.Helper()
	s, _, err := d.ServiceStatus(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]datapath.BackendStatus{}
	for _, b := range s.Backends {
		out[b.Address] = b
	}
	return out
}

// waitFor polls a backend's status until ok holds (packets cross veth pairs asynchronously) or
// echoTimeout passes, and returns the last status.
func waitFor(t *testing.T, d *Datapath, service, addr string, ok func(datapath.BackendStatus) bool) datapath.BackendStatus {
	t.Helper()
	deadline := time.Now().Add(echoTimeout)
	for {
		b := backendsOf(t, d, service)[addr]
		if ok(b) || time.Now().After(deadline) {
			return b
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func resetFlows(t *testing.T, d *Datapath, s *plan.Service, b netip.Addr, want int) {
	t.Helper()
	n, err := d.ResetFlows(context.Background(), s, plan.Backend{Addr: b})
	if err != nil || n != want {
		t.Fatalf("ResetFlows(%s, %s) = %d, %v; want %d", s.Name, b, n, err, want)
	}
}

// moveToNewNetns moves a link of the test's namespace into a new namespace, where it comes up
// with addrs and a default route via gw. The namespace lives until the test ends.
func moveToNewNetns(t *testing.T, link, gw string, addrs ...string) netns.NsHandle {
	t.Helper()
	back := testNetns(t)
	ns, err := netns.New() // switches the thread into it
	if err == nil {
		err = netns.Set(back)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	l, err := netlink.LinkByName(link)
	if err == nil {
		err = netlink.LinkSetNsFd(l, int(ns))
	}
	if err != nil {
		t.Fatal(err)
	}
	in(t, ns, func() {
		lo, _ := netlink.LinkByName("lo")
		for _, up := range []netlink.Link{lo, l} {
			if err := netlink.LinkSetUp(up); err != nil {
				t.Fatal(err)
			}
		}
		for _, a := range addrs {
			addr, _ := netlink.ParseAddr(a)
			if err := netlink.AddrAdd(l, addr); err != nil {
				t.Fatal(err)
			}
		}
		if err := netlink.RouteAdd(&netlink.Route{Gw: net.ParseIP(gw)}); err != nil {
			t.Fatal(err)
		}
	})
	return ns
}

// testNetns is the namespace the test's thread runs in.
func testNetns(t *testing.T) netns.NsHandle {
	t.Helper()
	h, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// in runs fn with the thread in ns (sockets opened there stay there) and brings it back.
func in(t *testing.T, ns netns.NsHandle, fn func()) {
	t.Helper()
	back := testNetns(t)
	if err := netns.Set(ns); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := netns.Set(back); err != nil {
			panic(err) // never leave the thread elsewhere
		}
	}()
	fn()
}

// echoTimeout bounds every exchange and every echo connection of the flow tests.
const echoTimeout = 5 * time.Second

func serveTCPEcho(t *testing.T) {
	serveEach(listenTCP(t, ":80"), func(c net.Conn) {
		_ = c.SetDeadline(time.Now().Add(echoTimeout))
		_, _ = io.Copy(c, c)
	})
}

// serveEach serves every connection l accepts with handle, in a goroutine of its own, and closes
// it after; it returns at once.
func serveEach(l net.Listener, handle func(net.Conn)) {
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
}

func serveUDPEcho(t *testing.T) {
	c, err := net.ListenPacket("udp4", ":53")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = c.WriteTo(buf[:n], from)
		}
	}()
}

// echoFrom dials addr from ns, checks that one message comes back and returns the open connection.
func echoFrom(t *testing.T, ns netns.NsHandle, network, addr string) net.Conn {
	t.Helper()
	var c net.Conn
	var err error
	in(t, ns, func() { c, err = net.DialTimeout(network, addr, echoTimeout) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(echoTimeout))
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo through %s: %q, %v", addr, buf, err)
	}
	return c
}

// natTopology routes between a client namespace (10.91.1.2, behind the test's 10.91.1.1) and a
// backends namespace (10.91.2.11 and 10.91.2.12 on veth1, behind the test's 10.91.2.1); the
// test's namespace forwards between them.
// natRig builds natTopology with TCP and UDP echo servers on the backends and applies a dns
// (udp/53) and a web (tcp/80) service in mode over both backends, all flows to the first.
func natRig(t *testing.T, mode string) (client netns.NsHandle, d *Datapath, dns, web plan.Service) {
	t.Helper()
	client, backends := natTopology(t)
	in(t, backends, func() {
		serveTCPEcho(t)
		serveUDPEcho(t)
	})
	d = newTestDatapath(t)
	dns, web = service("dns", "udp", "10.91.9.100", 53, 53), service("web", "tcp", "10.91.9.100", 80, 80)
	apply(t, d, twoBackendPlan(mode, 0, dns, web))
	return client, d, dns, web
}

func natTopology(t *testing.T) (client, backends netns.NsHandle) {
	t.Helper()
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "client0"}, PeerName: "client1"}
	addr, _ := netlink.ParseAddr("10.91.1.1/24")
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatal(err)
	}
	if err := netlink.AddrAdd(veth, addr); err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(veth); err != nil {
		t.Fatal(err)
	}
	client = moveToNewNetns(t, "client1", "10.91.1.1", "10.91.1.2/24")
	backends = moveToNewNetns(t, "veth1", "10.91.2.1", "10.91.2.11/24", "10.91.2.12/24")
	return client, backends
}

// TestKernelNATFlows sends real traffic through nat and fullnat services: Status must count
// flows, packets and active flows for the backend that took them and nothing for the other
// backend or for traffic that reaches a backend directly; ResetFlows must drop the flows so that
// the held connection is reset once re-balanced to the other backend.
func TestKernelNATFlows(t *testing.T) {
	for _, mode := range []string{"nat", "fullnat"} {
		t.Run(mode, func(t *testing.T) {
			inFreshNetns(t, func() {
				client, d, dns, web := natRig(t, mode)

				echoFrom(t, client, "tcp4", "10.91.2.11:80")
				zero := uint64(0)
				if got := backendsOf(t, d, "web")["10.91.2.11"]; !reflect.DeepEqual(got, datapath.BackendStatus{Address: "10.91.2.11", Weight: 1, Share: 1, Packets: &zero, Bytes: &zero}) {
					t.Errorf("a client talking to backend 10.91.2.11 directly shows in its status: %+v", got)
				}
				echoFrom(t, client, "tcp4", "10.91.9.100:80").Close() // closing: counted, not active
				held := echoFrom(t, client, "tcp4", "10.91.9.100:80")
				echoFrom(t, client, "udp4", "10.91.9.100:53")
				waitFor(t, d, "web", "10.91.2.11", func(b datapath.BackendStatus) bool { return b.ActiveFlows == 1 })
				for _, svc := range []struct {
					name                   string
					flows                  uint64
					minPackets, maxPackets uint64
				}{{"web", 2, 6, 20}, {"dns", 1, 1, 1}} { // web: SYN, ACK, data, FIN and ACKs; dns: the query, not the answer
					b := backendsOf(t, d, svc.name)
					if got := b["10.91.2.11"]; got.Flows != svc.flows || got.ActiveFlows != 1 || got.Packets == nil || *got.Packets < svc.minPackets || *got.Packets > svc.maxPackets || deref(got.Bytes) == 0 {
						t.Errorf("%s: backend 10.91.2.11 = %+v, want %d flows, 1 active, %d-%d packets", svc.name, got, svc.flows, svc.minPackets, svc.maxPackets)
					}
					if got := b["10.91.2.12"]; got.Flows != 0 || got.ActiveFlows != 0 || deref(got.Packets) != 0 {
						t.Errorf("%s: backend 10.91.2.12 = %+v, want nothing", svc.name, got)
					}
				}

				after := twoBackendPlan(mode, 1, dns, web) // new flows go to 10.91.2.12
				apply(t, d, after)
				webAfter := &after.Services[1]
				resetFlows(t, d, webAfter, backend11, 2) // the held connection and the closed one
				resetFlows(t, d, webAfter, backend11, 0)
				if got := backendsOf(t, d, "web")["10.91.2.11"].ActiveFlows; got != 0 {
					t.Errorf("after ResetFlows, backend 10.91.2.11 has %d active flows", got)
				}
				// The next segment is balanced to 10.91.2.12, which knows no such connection.
				_, _ = held.Write([]byte("ping"))
				if _, err := held.Read(make([]byte, 4)); !errors.Is(err, syscall.ECONNRESET) {
					t.Errorf("held connection after ResetFlows: read error %v, want a reset", err)
				}
				if got := backendsOf(t, d, "web")["10.91.2.12"]; got.Flows != 1 {
					t.Errorf("backend 10.91.2.12 = %+v, want the reset flow balanced to it once", got)
				}
			})
		})
	}
}

// TestKernelNATUncounted turns nft.packet_counters off and on under live flows: off, the backends
// still count new flows and active ones, and have no packet or byte count (nil, not 0), and no
// forwarded chain is left in the kernel; on again, the packet counters start from 0 and count.
func TestKernelNATUncounted(t *testing.T) {
	inFreshNetns(t, func() {
		client, d, dns, web := natRig(t, "nat")
		uncounted := twoBackendPlan("nat", 0, dns, web)
		for i := range uncounted.Services {
			uncounted.Services[i].Uncounted = true
		}
		apply(t, d, uncounted)
		if out, err := exec.Command("nft", "list", "table", "inet", TableName).CombinedOutput(); err != nil || strings.Contains(string(out), "chain "+forwardedChain) {
			t.Errorf("with packet counters off the table still has the forwarded chain (%v):\n%s", err, out)
		}
		held := echoFrom(t, client, "tcp4", "10.91.9.100:80")
		echoFrom(t, client, "udp4", "10.91.9.100:53")
		got := waitFor(t, d, "web", "10.91.2.11", func(b datapath.BackendStatus) bool { return b.ActiveFlows == 1 })
		if got.Flows != 1 || got.Packets != nil || got.Bytes != nil {
			t.Errorf("web, uncounted: backend 10.91.2.11 = %+v, want 1 flow and no packet or byte count", got)
		}
		if got := backendsOf(t, d, "dns")["10.91.2.11"]; got.Flows != 1 || got.Packets != nil {
			t.Errorf("dns, uncounted: backend 10.91.2.11 = %+v, want 1 flow and no packet count", got)
		}

		apply(t, d, twoBackendPlan("nat", 0, dns, web))
		if _, err := held.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(held, make([]byte, 4)); err != nil {
			t.Fatalf("the held flow after turning packet counters on: %v", err)
		}
		got = waitFor(t, d, "web", "10.91.2.11", func(b datapath.BackendStatus) bool { return deref(b.Packets) >= 1 })
		if got.Flows != 1 || got.ActiveFlows != 1 || got.Bytes == nil || *got.Bytes == 0 {
			t.Errorf("web, counted again: backend 10.91.2.11 = %+v, want the held flow's packets counted", got)
		}
	})
}

// reachVIPAtVeth0 routes vip out of veth1 to veth0's MAC: what the namespace sends to it arrives
// at veth0's ingress, where dsr's netdev chain takes it.
func reachVIPAtVeth0(t *testing.T, vip netip.Addr) {
	t.Helper()
	veth0, _ := netlink.LinkByName("veth0")
	veth1, _ := netlink.LinkByName("veth1")
	route := &netlink.Route{Dst: &net.IPNet{IP: vip.AsSlice(), Mask: net.CIDRMask(vip.BitLen(), vip.BitLen())}, LinkIndex: veth1.Attrs().Index}
	neigh := &netlink.Neigh{LinkIndex: veth1.Attrs().Index, IP: vip.AsSlice(), HardwareAddr: veth0.Attrs().HardwareAddr, State: netlink.NUD_PERMANENT}
	if err := netlink.RouteAdd(route); err != nil {
		t.Fatal(err)
	}
	if err := netlink.NeighAdd(neigh); err != nil {
		t.Fatal(err)
	}
}

// TestKernelDSRFlows sends packets into a dsr service (out of veth1, into veth0's ingress):
// Status must count new flows, packets and the flow map's elements per backend; ResetFlows must
// delete the elements of one backend only.
func TestKernelDSRFlows(t *testing.T) {
	inFreshNetns(t, func() {
		veth1, _ := netlink.LinkByName("veth1")
		vip := netip.MustParseAddr("10.91.9.101")
		client, _ := netlink.ParseAddr("10.91.1.2/24")
		if err := netlink.AddrAdd(veth1, client); err != nil {
			t.Fatal(err)
		}
		reachVIPAtVeth0(t, vip)
		d := newTestDatapath(t)
		p := twoBackendPlan("dsr", 0, service("game", "udp", vip.String(), 27000, 27015))
		p.Interfaces = []string{"veth0"}
		apply(t, d, p)

		for i, datagrams := range []int{3, 1} { // two flows, four packets
			c, err := net.Dial("udp4", netip.AddrPortFrom(vip, uint16(27000+i)).String())
			if err != nil {
				t.Fatal(err)
			}
			for range datagrams {
				if _, err := c.Write([]byte("ping")); err != nil {
					t.Fatal(err)
				}
			}
			c.Close()
		}
		got := waitFor(t, d, "game", "10.91.2.11", func(b datapath.BackendStatus) bool { return deref(b.Packets) >= 4 })
		if got.Flows != 2 || deref(got.Packets) != 4 || got.ActiveFlows != 2 {
			t.Errorf("backend 10.91.2.11 = %+v, want 2 flows, 4 packets, 2 active", got)
		}

		// A flow of the other backend, as the packet path would have learned it.
		s := &p.Services[0]
		tx := d.nft.NewTransaction()
		tx.Add(&knftables.Element{
			Family: knftables.NetDevFamily, Table: TableName, Map: namesOf(s).flows,
			Key: []string{"10.91.1.9", "4000", "27000"}, Value: []string{strconv.FormatUint(uint64(backendMarks(s.Backends)[1]), 10)},
		})
		if err := d.nft.Run(context.Background(), tx); err != nil {
			t.Fatal(err)
		}
		resetFlows(t, d, s, backend11, 2)
		resetFlows(t, d, s, backend11, 0)
		b := backendsOf(t, d, "game")
		if b["10.91.2.11"].ActiveFlows != 0 || b["10.91.2.12"].ActiveFlows != 1 {
			t.Errorf("after ResetFlows of 10.91.2.11: %+v", b)
		}
		unprogrammed := service("other", "udp", vip.String(), 28000, 28000)
		unprogrammed.Mode, unprogrammed.Backends = "dsr", s.Backends
		resetFlows(t, d, &unprogrammed, backend12, 0)
	})
}

// TestKernelBesideKeepsTheCommitTrusted: a transaction run through Beside on a table of the
// caller's own (the sync guard's) leaves what was committed trusted, one generation later: a
// Resync then renders nothing again and reads no table. A stranger's transaction in between, or
// the same one run outside Beside, does not.
func TestKernelBesideKeepsTheCommitTrusted(t *testing.T) {
	inFreshNetns(t, func() {
		d := newTestDatapath(t)
		both := loadPlan(t, "testdata/transitions/add-service/after.yaml")
		apply(t, d, both)
		web := d.committed.service("web")
		own := func(command string) func() (bool, error) {
			return func() (bool, error) { runNFT(t, command); return true, nil }
		}
		if err := d.Beside(own("add table inet sluice-sync")); err != nil {
			t.Fatal(err)
		}
		if gen := rulesetGeneration(); d.generation != gen {
			t.Fatalf("after Beside the state is trusted at generation %d, the ruleset is at %d", d.generation, gen)
		}
		d.Resync()
		apply(t, d, both)
		if d.committed.service("web") != web {
			t.Fatal("a Resync after a transaction run through Beside rendered web again")
		}
		if err := d.Beside(func() (bool, error) {
			runNFT(t, "add table inet someone-else") // a stranger's, while Beside runs
			runNFT(t, "delete table inet sluice-sync")
			return true, nil
		}); err != nil {
			t.Fatal(err)
		}
		if d.generation != 0 && d.generation == rulesetGeneration() {
			t.Error("Beside kept the state trusted across a stranger's transaction too")
		}
		runNFT(t, "add table inet sluice-sync") // outside Beside
		if d.generation == rulesetGeneration() {
			t.Error("a transaction outside Beside left the state trusted")
		}
	})
}
