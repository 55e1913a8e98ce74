package nft

import (
	"bufio"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/sluicelb/sluice/internal/plan"
)

// serveWhoAmI answers each line a connection sends with the address it was accepted on (the
// backend the balancer chose), for as long as the connection lasts.
func serveWhoAmI(t *testing.T, addr string) {
	serveEach(listenTCP(t, addr), func(c net.Conn) {
		r := bufio.NewReader(c)
		for {
			if _, err := r.ReadString('\n'); err != nil {
				return
			}
			if _, err := io.WriteString(c, c.LocalAddr().(*net.TCPAddr).IP.String()+"\n"); err != nil {
				return
			}
		}
	})
}

// ask sends a line on a held connection and returns the backend that answered.
func ask(c net.Conn) (netip.Addr, error) {
	_ = c.SetDeadline(time.Now().Add(echoTimeout))
	if _, err := io.WriteString(c, "who\n"); err != nil {
		return netip.Addr{}, err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return netip.Addr{}, err
	}
	return netip.ParseAddr(strings.TrimSpace(line))
}

// TestKernelSecondChance: connections held through the balancer lose their conntrack entries
// (as on a node that takes them over without their state) right after a backend's weight went to
// 0. Their next segment is a new flow to conntrack; the prev map sends it to the backend its slot
// had, so every connection goes on, those of the drained backend included. The same slots change
// again, twice, and each apply succeeds; a connection opened after the changes never goes to the
// drained backend.
func TestKernelSecondChance(t *testing.T) {
	inFreshNetns(t, func() {
		client, d := sessionRig(t)
		vip := netip.MustParseAddrPort("10.91.9.100:82")
		drained := netip.MustParseAddr("10.91.2.13")
		apply(t, d, sessionPlan(t, "", "port: 82", rigBackends(netip.Addr{})...))
		var held []net.Conn
		onDrained := 0
		for i := range 24 {
			c := dialSrc(t, client, netip.AddrPortFrom(clients24a[i%3], uint16(41000+i)), vip)
			t.Cleanup(func() { c.Close() })
			b, err := ask(c)
			if err != nil {
				t.Fatal(err)
			}
			if b == drained {
				onDrained++
			}
			held = append(held, c)
		}
		if onDrained == 0 {
			t.Fatalf("none of %d connections reached %s: pick other ports", len(held), drained)
		}
		apply(t, d, sessionPlan(t, "", "port: 82", rigBackends(drained)...))
		if err := netlink.ConntrackTableFlush(netlink.ConntrackTable); err != nil {
			t.Fatal(err)
		}
		for i, c := range held {
			if _, err := ask(c); err != nil {
				t.Errorf("connection %d, its conntrack entry gone after the change: %v", i, err)
			}
		}
		t.Logf("%d connections, %d of them on the drained backend", len(held), onDrained)
		// The weight comes back, then goes again: slots that changed before change again, and
		// each change's record replaces the one before it.
		apply(t, d, sessionPlan(t, "", "port: 82", rigBackends(netip.Addr{})...))
		apply(t, d, sessionPlan(t, "", "port: 82", rigBackends(drained)...))
		for i := range 12 {
			c := dialSrc(t, client, netip.AddrPortFrom(clients24b[i%2], uint16(42000+i)), vip)
			b, err := ask(c)
			c.Close()
			if err != nil || b == drained {
				t.Errorf("a new connection after the change: %s, %v; want another backend than %s", b, err, drained)
			}
		}
	})
}

// TestKernelDSRSecondChance: dsr connections held through the balancer lose their flow entries
// (a node that takes them over without their state) right after one backend's weight went to 0.
// Their next segments reach the table; the prev map sends those whose slot changed to the backend
// it had, so every connection goes on, those of the drained backend included.
func TestKernelDSRSecondChance(t *testing.T) {
	inFreshNetns(t, func() {
		vip := netip.MustParseAddr("10.91.9.101")
		client, backends, nss := dsrTopology(t, vip)
		for i, ns := range nss {
			var l net.Listener
			in(t, ns, func() { l = listenTCP(t, ":80") })
			go serveName(l, []string{"b11", "b12"}[i])
		}
		d := newTestDatapath(t)
		web := service("web", "tcp", vip.String(), 80, 80)
		web.Mode, web.Scheduler, web.Fallback, web.FlowTimeout = "dsr", "maglev", "drop", time.Minute
		web.Backends = []plan.Backend{backends[0], backends[1]}
		web.Backends[0].Weight, web.Backends[1].Weight = 1, 1
		web.Slots = []int{0, 1, 0, 1, 0, 1, 0}
		p := &plan.Plan{Datapath: "nft", Interfaces: []string{"client0"}, Services: []plan.Service{web}}
		apply(t, d, p)
		to := netip.AddrPortFrom(vip, 80).String()
		var held []net.Conn
		onB11 := 0
		for i := range 16 {
			c, err := dialFrom(t, client, "tcp4", 41000+i, to)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			name, err := nameFrom(c)
			if err != nil {
				t.Fatal(err)
			}
			if name == "b11" {
				onB11++
			}
			held = append(held, c)
		}
		if onB11 == 0 {
			t.Fatal("no connection on b11: pick other ports")
		}
		web.Backends[0].Weight = 0
		web.Slots = []int{1, 1, 1, 1, 1, 1, 1}
		apply(t, d, &plan.Plan{Datapath: "nft", Interfaces: []string{"client0"}, Services: []plan.Service{web}})
		runNFT(t, "flush map netdev sluice "+namesOf(&web).flows)
		for i, c := range held {
			_ = c.SetDeadline(time.Now().Add(echoTimeout))
			if _, err := c.Write([]byte("ping")); err != nil {
				t.Errorf("connection %d: %v", i, err)
				continue
			}
			if _, err := io.ReadFull(c, make([]byte, 4)); err != nil {
				t.Errorf("connection %d, its flow entry gone after the change: %v", i, err)
			}
		}
		t.Logf("%d connections, %d of them on the drained b11", len(held), onB11)
	})
}
