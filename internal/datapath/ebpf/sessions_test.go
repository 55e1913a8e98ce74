package ebpf

import (
	"fmt"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/datapath"
)

// The schedulers and session settings beyond maglev, run through the loaded program
// (BPF_PROG_TEST_RUN) on the maps Apply programmed: sh, lc, wlc, connection thresholds and
// persistence.

var sessionVIP = netip.MustParseAddrPort("10.91.9.100:80")

// connect sends a SYN from client and returns the backend the program sent it to.
func connect(t *testing.T, d *Datapath, client netip.AddrPort) netip.Addr {
	t.Helper()
	return destination(t, d, segmentWith(t, client, vipOf(client), layers.TCP{SYN: true})).Addr()
}

// disconnect sends the client's FIN of its connection.
func disconnect(t *testing.T, d *Datapath, client netip.AddrPort) {
	t.Helper()
	destination(t, d, segmentWith(t, client, vipOf(client), layers.TCP{FIN: true, ACK: true}))
}

// vipOf is the VIP a test client of that family connects to.
func vipOf(client netip.AddrPort) netip.AddrPort {
	if client.Addr().Is6() {
		return netip.MustParseAddrPort("[fd00:91:9::100]:80")
	}
	return sessionVIP
}

// client is test client number i: 10.91.<i/250>.<i%250+1> (or fd00:91:1::<i>) on port.
func client(i int, port uint16, v6 bool) netip.AddrPort {
	if v6 {
		return netip.AddrPortFrom(netip.MustParseAddr(fmt.Sprintf("fd00:91:1::%x", i+1)), port)
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 91, byte(20 + i/250), byte(i%250 + 1)}), port)
}

// threeBackends is a service over .11, .12 and .13 with weights 1, 2 and 3 and the given lines.
func threeBackends(lines string) string {
	return `datapath: ebpf
services:
  - name: web
    vip: 10.91.9.100
    port: 80
` + lines + `
    backends:
      - address: 10.91.2.11
      - address: 10.91.2.12
        weight: 2
      - address: 10.91.2.13
        weight: 3
`
}

// checkShares fails when the counts of new flows per backend stray from the weights 1:2:3 by
// more than 5 standard deviations (a false alarm once in millions of runs).
func checkShares(t *testing.T, what string, got map[netip.Addr]int, n int) {
	t.Helper()
	for i, w := range []float64{1, 2, 3} {
		b := netip.AddrFrom4([4]byte{10, 91, 2, byte(11 + i)})
		p := w / 6
		mean, sd := float64(n)*p, math.Sqrt(float64(n)*p*(1-p))
		if d := math.Abs(float64(got[b]) - mean); d > 5*sd {
			t.Errorf("%s: %s took %d of %d new flows, want %.0f ± %.0f", what, b, got[b], n, mean, 5*sd)
		}
	}
}

func TestSourceHashKeepsAClientOnOneBackend(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	r.apply(d, planFromYAML(t, threeBackends("    scheduler: sh")))
	per := map[netip.Addr]int{}
	const clients = 600
	for i := range clients {
		first := connect(t, d, client(i, 40000, false))
		for port := uint16(40001); port < 40005; port++ {
			if to := connect(t, d, client(i, port, false)); to != first {
				t.Fatalf("client %d: port %d went to %s, port 40000 to %s: sh hashes the address only", i, port, to, first)
			}
		}
		per[first]++
	}
	t.Logf("sh, %d client addresses over weights 1:2:3: %v", clients, per)
	checkShares(t, "sh", per, clients)

	r.apply(d, planFromYAML(t, threeBackends("    scheduler: sh\n    sh_port: true")))
	per = map[netip.Addr]int{}
	const ports = 600
	for port := range uint16(ports) {
		per[connect(t, d, client(7, 30000+port, false))]++
	}
	t.Logf("sh with sh_port, one client over %d ports: %v", ports, per)
	checkShares(t, "sh with sh_port, one client", per, ports)
}

func TestLeastConnectionsFillsTheEmptiest(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	r.apply(d, planFromYAML(t, threeBackends("    scheduler: lc")))
	per := map[netip.Addr][]netip.AddrPort{}
	for i := range 30 {
		c := client(i, 41000, false)
		to := connect(t, d, c)
		per[to] = append(per[to], c)
	}
	for b, cs := range per {
		if len(cs) != 10 {
			t.Fatalf("lc gave %s %d of 30 flows, want 10 each: %v", b, len(cs), per)
		}
	}
	// Closing five flows of .11 makes it the emptiest: it takes the next five new flows.
	emptied := netip.MustParseAddr("10.91.2.11")
	for _, c := range per[emptied][:5] {
		disconnect(t, d, c)
	}
	for i := range 5 {
		if to := connect(t, d, client(100+i, 41000, false)); to != emptied {
			t.Fatalf("new flow %d after closing 5 of %s's went to %s", i, emptied, to)
		}
	}
	checkConnections(t, d, map[string]uint64{"10.91.2.11": 10, "10.91.2.12": 10, "10.91.2.13": 10})

	r.apply(d, planFromYAML(t, threeBackends("    scheduler: wlc")))
	counted := map[netip.Addr]int{}
	for i := range 90 {
		counted[connect(t, d, client(200+i, 41000, false))]++
	}
	// wlc fills each backend to 15 flows per unit of weight: 15+5 (it had 10), 30+... from the 10 each it had.
	st := connections(t, d)
	t.Logf("wlc: active flows %v after %d new flows went %v", st, 90, counted)
	if st["10.91.2.11"]*2 != st["10.91.2.12"] || st["10.91.2.11"]*3 != st["10.91.2.13"] {
		t.Fatalf("wlc left %v active flows (weights 1:2:3) after %v new ones", st, counted)
	}
}

// The tail of a connection another node began (ECMP moved it here, or this node came back after
// it began) is forwarded, but a FIN or a reset recorded as a new flow would count as an open
// connection until the flow timeout: a drained node would wait for it, lc would steer around it.
func TestATailIsNotAnOpenConnection(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	r.apply(d, planFromYAML(t, threeBackends("    scheduler: lc")))
	fin := client(1, 41000, false)
	disconnect(t, d, fin)
	reset := client(2, 41000, false)
	destination(t, d, segmentWith(t, reset, vipOf(reset), layers.TCP{RST: true}))
	zero := map[string]uint64{"10.91.2.11": 0, "10.91.2.12": 0, "10.91.2.13": 0}
	checkConnections(t, d, zero)
	sts, err := d.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range sts[0].Backends {
		if b.ActiveFlows != 0 {
			t.Errorf("%s: %d active flows after two tails of connections it never saw, want 0", b.Address, b.ActiveFlows)
		}
	}
	// A new connection from the same port is counted as usual.
	to := connect(t, d, fin)
	zero[to.String()] = 1
	checkConnections(t, d, zero)
}

// connections reads the program's active flow count of each backend of web.
func connections(t *testing.T, d *Datapath) map[string]uint64 {
	t.Helper()
	sts, err := d.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, b := range sts[0].Backends {
		out[b.Address] = b.Connections
	}
	return out
}

func checkConnections(t *testing.T, d *Datapath, want map[string]uint64) {
	t.Helper()
	if got := connections(t, d); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("active flows by backend are %v, want %v", got, want)
	}
}

func TestConnectionThresholdsHaveHysteresis(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	r.apply(d, planFromYAML(t, `datapath: ebpf
services:
  - name: web
    vip: 10.91.9.100
    port: 80
    backends:
      - address: 10.91.2.11
        max_connections: 4
        min_connections: 2
      - address: 10.91.2.12
`))
	limited := netip.MustParseAddr("10.91.2.11")
	var onLimited []netip.AddrPort
	for i := range 100 {
		c := client(i, 42000, false)
		if connect(t, d, c) == limited {
			onLimited = append(onLimited, c)
		}
	}
	if len(onLimited) != 4 {
		t.Fatalf("the backend with max_connections 4 took %d of 100 flows", len(onLimited))
	}
	overloaded := func() bool {
		sts, err := d.Status(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return sts[0].Backends[0].Overloaded
	}
	if !overloaded() {
		t.Fatal("the backend at max_connections does not read as overloaded")
	}
	// Down to 3 (above min_connections 2) it still takes nothing; at 2 it takes flows again.
	disconnect(t, d, onLimited[0])
	if n := countTo(t, d, limited, 100, 50); n != 0 || !overloaded() {
		t.Fatalf("at 3 active flows (min_connections 2) the backend took %d new flows", n)
	}
	disconnect(t, d, onLimited[1])
	if n := countTo(t, d, limited, 200, 100); n != 2 {
		t.Fatalf("back at min_connections the backend took %d of 100 new flows, want 2 (up to max_connections 4)", n)
	}
}

// countTo sends n new flows from clients first.. and counts those that went to b.
func countTo(t *testing.T, d *Datapath, b netip.Addr, first, n int) int {
	t.Helper()
	count := 0
	for i := range n {
		if connect(t, d, client(first+i, 43000, false)) == b {
			count++
		}
	}
	return count
}

// persistentService is a service over three backends with persistence per /24 (/120 for
// IPv6); drained, when valid, has weight 0.
func persistentService(v6 bool, drained netip.Addr) string {
	vip, prefix, net := "10.91.9.100", 24, "10.91.2."
	if v6 {
		vip, prefix, net = "fd00:91:9::100", 120, "fd00:91:2::"
	}
	out := fmt.Sprintf("datapath: ebpf\nservices:\n  - name: web\n    vip: %s\n    port: 80\n    persistence_timeout: 300s\n    persistence_granularity: %d\n    backends:\n", vip, prefix)
	for _, host := range []string{"11", "12", "13"} {
		out += "      - address: " + net + host + "\n"
		if net+host == drained.String() {
			out += "        weight: 0\n"
		}
	}
	return out
}

func TestPersistenceKeepsAClientsBackend(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(map[bool]string{false: "ipv4", true: "ipv6"}[v6], func(t *testing.T) {
			r := newRig(t)
			d := r.datapath(Options{})
			r.apply(d, planFromYAML(t, persistentService(v6, netip.Addr{})))
			// Clients 0-15 share a /24 (a /120): every connection of every one of them, on any port,
			// goes where the first went.
			first := connect(t, d, client(0, 44000, v6))
			for i := range 16 {
				for port := uint16(44001); port < 44011; port++ {
					if to := connect(t, d, client(i, port, v6)); to != first {
						t.Fatalf("client %d port %d went to %s, the group's first connection to %s", i, port, to, first)
					}
				}
			}
			// Draining the backend sends the group elsewhere, and there it stays.
			r.apply(d, planFromYAML(t, persistentService(v6, first)))
			second := connect(t, d, client(3, 45000, v6))
			if second == first {
				t.Fatalf("a new connection went to the drained backend %s", first)
			}
			for i := range 16 {
				if to := connect(t, d, client(i, 45001, v6)); to != second {
					t.Fatalf("after the drain client %d went to %s, the group's first to %s", i, to, second)
				}
			}
		})
	}
}

func TestPersistenceExpires(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	r.apply(d, planFromYAML(t, threeBackends("    persistence_timeout: 60s")))
	addrOf := map[uint32]netip.Addr{}
	for key, id := range idsOf(t, d) {
		if a, err := netip.ParseAddr(strings.TrimPrefix(key, "web/")); err == nil {
			addrOf[id] = a
		}
	}
	c := client(0, 46000, false)
	connect(t, d, c)
	var k sluicePersistKey
	var e sluicePersistEntry
	if !d.maps.Persist.Iterate().Next(&k, &e) {
		t.Fatal("the program recorded no persistent client")
	}
	moved := 0
	for port := range uint16(200) {
		if err := d.maps.Persist.Lookup(k, &e); err != nil {
			t.Fatal(err)
		}
		was := addrOf[e.BackendId]
		// Age the entry past the timeout (at any uptime: wrapping below boot is what the program
		// compares as signed).
		e.LastNew -= uint64(2 * time.Minute)
		if err := d.maps.Persist.Put(k, e); err != nil {
			t.Fatal(err)
		}
		if connect(t, d, netip.AddrPortFrom(c.Addr(), 46001+port)) != was {
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("an expired persistent client kept its backend on 200 new connections")
	}
}

// tcShot is TC_ACT_SHOT, what the tc program returns for a dropped packet.
const tcShot = 2

// runVerdict runs the loaded program on a frame and returns its return code.
func runVerdict(t *testing.T, d *Datapath, frame []byte) uint32 {
	t.Helper()
	ret, err := d.prog.Run(&ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256)})
	if err != nil {
		t.Fatal(err)
	}
	return ret
}

func TestSourceListsRefuseNewFlows(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	lists := "    source_allow: [10.91.0.0/16, 10.93.0.7]\n    source_deny: [10.91.20.0/24]"
	r.apply(d, planFromYAML(t, threeBackends(lists)))
	syn := func(c string) []byte {
		return segmentWith(t, netip.MustParseAddrPort(c), sessionVIP, layers.TCP{SYN: true})
	}
	for _, c := range []struct {
		client  string
		refused bool
	}{
		{"10.91.21.5:47000", false}, // allowed
		{"10.93.0.7:47000", false},  // allowed, one address
		{"10.91.20.5:47000", true},  // denied: deny wins over the allowed /16
		{"10.93.0.8:47000", true},   // not allowed
		{"10.92.1.1:47000", true},   // not allowed
	} {
		if got := runVerdict(t, d, syn(c.client)) == tcShot; got != c.refused {
			t.Errorf("%s: dropped %v, want %v", c.client, got, c.refused)
		}
	}
	// A flow established before its client is denied keeps going; its next SYN is refused.
	established := netip.MustParseAddrPort("10.91.30.1:47001")
	connect(t, d, established)
	r.apply(d, planFromYAML(t, threeBackends("    source_deny: [10.91.30.0/24]")))
	ack := segmentWith(t, established, sessionVIP, layers.TCP{ACK: true})
	if runVerdict(t, d, ack) == tcShot {
		t.Error("an established flow was dropped when its client became denied")
	}
	if runVerdict(t, d, syn(established.String())) != tcShot {
		t.Error("a denied client's new flow was not dropped")
	}
	if got := refused(t, d); got != (datapath.Refusals{SourceList: 4}) {
		t.Errorf("refusals %+v, want 4 by the source lists (3 above, 1 after the change)", got)
	}
	// The lists read back after a restart are what was programmed: applying the same plan again
	// writes nothing; removing the lists leaves the tries empty.
	restarted := r.datapath(Options{})
	if n := r.apply(restarted, planFromYAML(t, threeBackends("    source_deny: [10.91.30.0/24]"))); n != 0 {
		t.Errorf("re-applying after a restart wrote %d entries, want 0", n)
	}
	r.apply(restarted, planFromYAML(t, threeBackends("")))
	for _, m := range []*ebpf.Map{restarted.maps.SourceAllow, restarted.maps.SourceDeny} {
		var k sluiceSourceKey
		var v uint8
		if m.Iterate().Next(&k, &v) {
			t.Errorf("%s still holds %+v after the lists were removed", m, k)
		}
	}
}

// refused reads the refusal counters of the service web.
func refused(t *testing.T, d *Datapath) datapath.Refusals {
	t.Helper()
	st, found, err := d.ServiceStatus(t.Context(), "web")
	if err != nil || !found {
		t.Fatalf("status of web: found %v, %v", found, err)
	}
	return st.Refused
}

// tcOK is TC_ACT_OK, what the tc program returns for a packet it leaves to the stack (and, in
// this rig, for one it forwards: the route's neighbour is unresolved).
const tcOK = 0

// admitted sends a SYN from each client and counts those the program made a flow for.
func admitted(t *testing.T, d *Datapath, clients []netip.AddrPort) int {
	t.Helper()
	n := 0
	for _, c := range clients {
		runVerdict(t, d, segmentWith(t, c, sessionVIP, layers.TCP{SYN: true}))
		var f sluiceFlow
		if d.maps.Flows.Lookup(flowKeyOf(c, sessionVIP, unix.IPPROTO_TCP), &f) == nil {
			n++
		}
	}
	return n
}

// clientsFrom is n clients: distinct addresses (one when sameAddress) and ports from port.
func clientsFrom(first, n int, port uint16, sameAddress bool) []netip.AddrPort {
	out := make([]netip.AddrPort, n)
	for i := range n {
		if sameAddress {
			out[i] = client(first, port+uint16(i), false)
		} else {
			out[i] = client(first+i, port, false)
		}
	}
	return out
}

func TestRateLimitsAdmitABurstThenTheRate(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	r.apply(d, planFromYAML(t, threeBackends("    limits: {new_connections_per_second: 5, new_connections_per_source_per_second: 2}")))
	start := time.Now()
	// One client: its own limit (2 a second, a burst of 2) binds first.
	one := admitted(t, d, clientsFrom(0, 20, 48000, true))
	// Ten clients, one SYN each: the service's limit (5 a second, a burst of 5) binds, the 2
	// flows already taken included.
	many := admitted(t, d, clientsFrom(10, 10, 48000, false))
	// The bounds allow for the time the test took: a slow machine refills the buckets.
	refill := int(time.Since(start)/time.Second) + 1
	if one < 2 || one > 2+2*refill {
		t.Errorf("one client's 20 new flows: %d admitted, want 2 (+%d for the time taken)", one, 2*refill)
	}
	if many < 3 || one+many > 5+5*refill {
		t.Errorf("ten clients after that: %d admitted, want 3 (the service's 5 less the client's 2, +%d)", many, 5*refill)
	}
}

func TestConnectionLimitsCountActiveFlows(t *testing.T) {
	r := newRig(t)
	d := r.datapath(Options{})
	r.apply(d, planFromYAML(t, threeBackends("    limits: {connections: 4, connections_per_source: 2}\n    limit_action: reset")))
	a := clientsFrom(0, 3, 49000, true) // one address, three connections
	if n := admitted(t, d, a); n != 2 {
		t.Fatalf("one client opened %d of 3 connections, want 2 (connections_per_source)", n)
	}
	// Reset, not drop: the SYN over the limit went to the stack, which answers it with a reset.
	if v := runVerdict(t, d, segmentWith(t, a[2], sessionVIP, layers.TCP{SYN: true})); v != tcOK {
		t.Errorf("a SYN over the limit with limit_action reset: verdict %d, want %d (to the stack)", v, tcOK)
	}
	b := clientsFrom(1, 3, 49000, false) // three more clients
	if n := admitted(t, d, b); n != 2 {
		t.Fatalf("3 more clients opened %d connections, want 2 (connections: 4)", n)
	}
	// A connection closing makes room for one.
	disconnect(t, d, a[0])
	if n := admitted(t, d, b[2:]); n != 1 {
		t.Fatalf("after one connection closed, a new one was admitted %d times, want 1", n)
	}
	if got, want := refused(t, d), (datapath.Refusals{ConnectionsPerSource: 2, Connections: 1}); got != want {
		t.Errorf("refusals %+v, want %+v", got, want)
	}
	// Flows that end unseen (idle) leave the count at the daemon's next recount.
	it := d.maps.Flows.Iterate()
	var k sluiceFlowKey
	var f sluiceFlow
	var idle []sluiceFlowKey
	for it.Next(&k, &f) {
		idle = append(idle, k)
	}
	for _, k := range idle {
		if err := d.maps.Flows.Lookup(k, &f); err != nil {
			t.Fatal(err)
		}
		f.LastSeen = idleLastSeen(t) // in the clock the recount reads, which a time namespace shifts
		if err := d.maps.Flows.Put(k, f); err != nil {
			t.Fatal(err)
		}
	}
	if n := admitted(t, d, clientsFrom(20, 1, 49000, false)); n != 0 {
		t.Fatalf("before the recount a new client was admitted over the limit")
	}
	if err := d.recount(); err != nil {
		t.Fatal(err)
	}
	if n := admitted(t, d, clientsFrom(30, 4, 49000, false)); n != 4 {
		t.Fatalf("after the recount %d of 4 new clients were admitted, want 4: the idle flows still count", n)
	}
}
