package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/sluicelb/sluice/internal/lab"
)

// Sizes of the traffic the suite makes.
const (
	workers             = 4     // parallel client workers
	distributionConns   = 3000  // one-request connections of the distribution test
	distributionTol     = 0.15  // relative tolerance of each backend's share
	churnConns          = 20000 // one-request connections per churn run
	churnPortFirst      = 40000
	churnPortLast       = 40999 // 1000 client ports
	drainedConns        = 200   // new connections after a backend's weight went to 0
	ipv6Conns           = 300
	udpExchanges        = 300
	clientPortRangeName = "net.ipv4.ip_local_port_range" // covers IPv6 too
)

// TestNFT runs the suite over every mode of the nftables datapath, one lab for all of it.
func TestNFT(t *testing.T) {
	requireLab(t)
	for _, f := range nftFlavors {
		t.Run(f.Name, func(t *testing.T) { runSuite(t, f) })
	}
}

// TestEBPF runs the same suite over every mode of the eBPF datapath.
func TestEBPF(t *testing.T) {
	requireLab(t)
	for _, f := range ebpfFlavors {
		t.Run(f.Name, func(t *testing.T) { runSuite(t, f) })
	}
}

// forEveryFlavor runs body as a subtest per flavor of both datapaths, named datapath-mode, and
// flushes the balancer after each.
func forEveryFlavor(t *testing.T, body func(t *testing.T, f Flavor)) {
	for _, f := range slices.Concat(nftFlavors, ebpfFlavors) {
		t.Run(f.Datapath+"-"+f.Name, func(t *testing.T) {
			t.Cleanup(func() { flush(t) })
			body(t, f)
		})
	}
}

// runSuite is the datapath-independent suite: everything it knows about a datapath's behaviour is
// in the flavor. Every test starts from `sluice flush` and applies its own config.
func runSuite(t *testing.T, f Flavor) {
	t.Cleanup(func() { flush(t) })
	t.Run("distribution", func(t *testing.T) { testDistribution(t, f) })
	t.Run("churn", func(t *testing.T) {
		for _, s := range f.ChurnSchedulers {
			t.Run(s, func(t *testing.T) { testChurn(t, f, s, true) })
		}
		for _, s := range f.ChurnObserved {
			t.Run(s+"-observed", func(t *testing.T) { testChurn(t, f, s, false) })
		}
	})
	t.Run("long-lived", func(t *testing.T) { testLongLived(t, f) })
	t.Run("invalid-config", func(t *testing.T) { testInvalidConfig(t, f) })
	t.Run("ipv6", func(t *testing.T) { testIPv6(t, f) })
	t.Run("udp", func(t *testing.T) { testUDP(t, f) })
	t.Run("idempotent", func(t *testing.T) { testIdempotent(t, f) })
	if f.Datapath == "ebpf" {
		t.Run("which", func(t *testing.T) { testWhich(t, f) })
	}
}

// testWhich: `sluice which` names the backend that a real connection from the same source port
// then reaches, for 30 source ports, and forgets the flows it simulated. A port another socket of
// the client's holds (an earlier test's connection) is passed over for the next.
func testWhich(t *testing.T, f Flavor) {
	svc := webService("maglev", equalPool(false))
	applyFresh(t, f.Config(svc))
	client := theLab.ClientAddr(false)
	checked := 0
	for port := 42000; checked < 30 && port < 42300; port++ {
		var c struct {
			Backend string `json:"backend"`
			Tracked bool   `json:"tracked"`
		}
		out := mustSluice(t, "which", "-o", "json", svc.Addr().String(), netip.AddrPortFrom(client, uint16(port)).String())
		if err := json.Unmarshal([]byte(out), &c); err != nil || c.Tracked {
			t.Fatalf("sluice which: %v, %s: want an untracked flow", err, out)
		}
		var got string
		err := inClient(func() (err error) { got, err = httpFrom(svc.Addr(), port); return err })
		if errors.Is(err, syscall.EADDRINUSE) {
			continue
		}
		if err != nil {
			t.Fatalf("from port %d: %v", port, err)
		}
		checked++
		if want := theLab.BackendAddr(backendIndex(got), false).String() + ":80"; c.Backend != want {
			t.Errorf("from port %d: sluice which says %s, the connection reached %s (%s)", port, c.Backend, want, got)
		}
	}
	if checked < 30 {
		t.Errorf("only %d of 300 source ports were free in the client", checked)
	}
}

// testDistribution: a weighted maglev service spreads >= 3000 connections (source ports chosen
// by the kernel) over the backends within 15% (relative) of each backend's weighted share, and
// `sluice list` shows the service, its backends and one counted flow per connection.
func testDistribution(t *testing.T, f Flavor) {
	weights := map[int]int{1: 1, 2: 2, 3: 1}
	svc := webService("maglev", pool(false, weights))
	applyFresh(t, f.Config(svc))

	res := hammer(t, workers, distributionConns, func() (string, error) { return httpOnce(svc.Addr()) })
	t.Logf("distribution: %v", res)
	res.requireNoFailures(t)
	answered := res.Requests - res.Failures
	svcs := list(t)
	s := findService(t, svcs, svc.Name)
	// Each backend gets its share of the Maglev table, which is within a few percent of its
	// weight's (compact nft tables: 5%; the plan's tests hold that); the traffic must follow the table.
	tableShare := map[string]float64{}
	for _, b := range s.Backends {
		tableShare[b.Address] = b.Share
	}
	for i, w := range weights {
		name := lab.BackendName(i)
		want := tableShare[theLab.BackendAddr(i, false).String()]
		got := float64(res.PerBackend[name]) / float64(answered)
		if want == 0 || math.Abs(got-want) > distributionTol*want {
			t.Errorf("%s (weight %d): share %.3f, its table share %.3f ±%.0f%%", name, w, got, want, 100*distributionTol)
		}
	}
	if len(res.PerBackend) != len(weights) {
		t.Errorf("backends answering: %v, want b1..b%d", res.Backends(), len(weights))
	}

	if s.Protocol != "tcp" || s.VIP != svc.VIP.String() || s.Ports != "80" || s.Mode != f.Mode || s.Scheduler != "maglev" || s.Slots == 0 {
		t.Errorf("listed service %+v, want tcp %s 80 %s maglev with slots", s, svc.VIP, f.Mode)
	}
	var flows, packets uint64
	var listed []string
	for _, b := range s.Backends {
		listed = append(listed, fmt.Sprintf("%s weight %d share %.3f flows %d packets %d", b.Address, b.Weight, b.Share, b.Flows, b.Packets))
		flows += b.Flows
		packets += b.Packets
	}
	t.Logf("listed backends: %s", strings.Join(listed, "; "))
	if len(s.Backends) != len(svc.Backends) {
		t.Errorf("listed %d backends, want %d", len(s.Backends), len(svc.Backends))
	}
	for _, want := range svc.Backends {
		i := slices.IndexFunc(s.Backends, func(b listedBackend) bool { return b.Address == want.Address })
		if i < 0 {
			t.Errorf("backend %s not listed", want.Address)
		} else if s.Backends[i].Weight != want.Weight {
			t.Errorf("backend %s listed with weight %d, want %d", want.Address, s.Backends[i].Weight, want.Weight)
		}
	}
	// Each connection is one flow and at least 3 client packets (SYN, request, ACKs).
	if flows < uint64(res.Requests) || packets < 3*flows {
		t.Errorf("listed flows sum to %d and packets to %d, want >= %d connections and 3 packets each", flows, packets, res.Requests)
	}
}

func findService(t *testing.T, svcs []listedService, name string) listedService {
	t.Helper()
	for _, s := range svcs {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("service %s not in sluice list: %+v", name, svcs)
	return listedService{}
}

// testChurn is the TIME_WAIT trap: with the client's ephemeral ports narrowed to 1000, 20,000
// one-request connections reuse each source port 20 times or more (connect() prefers the even
// half of the range: about 40 times each) while the backends, which close first, still hold the
// previous connection of that 4-tuple in TIME_WAIT (and for nat and fullnat so does the
// balancer's conntrack). A reused port must be balanced so that the new SYN is accepted at
// once: no failure and no stall (see stallThreshold). strict=false only reports.
func testChurn(t *testing.T, f Flavor, scheduler string, strict bool) {
	svc := webService(scheduler, equalPool(false))
	applyFresh(t, f.Config(svc))
	setSysctl(t, theLab.ClientNS(), clientPortRangeName, fmt.Sprintf("%d %d", churnPortFirst, churnPortLast))

	res := hammer(t, workers, churnConns, func() (string, error) { return httpOnce(svc.Addr()) })
	t.Logf("churn %s/%s: connections %d, failures %d, stalls %d, max latency %v, elapsed %v, %.0f connections/s, per backend %v",
		f.Name, scheduler, res.Requests, res.Failures, res.Stalls, res.MaxLatency, res.Elapsed,
		float64(res.Requests)/res.Elapsed.Seconds(), res.PerBackend)
	if tw := timeWaits(t, churnPortFirst, churnPortLast); tw != nil {
		// TIME_WAIT lasts 60 s, so the count includes earlier runs of the last minute.
		t.Logf("backends' TIME_WAIT sockets from the %d client ports %d-%d after the run (and earlier ones of the last minute): %v",
			churnPortLast-churnPortFirst+1, churnPortFirst, churnPortLast, tw)
	}
	if !strict {
		if res.Failures > 0 {
			t.Logf("first failures (not asserted):\n  %s", strings.Join(res.FirstErrs, "\n  "))
		}
		return
	}
	res.requireNoFailures(t)
	if res.Stalls > 0 {
		t.Errorf("%d of %d requests stalled for >= %v (a SYN retransmission)", res.Stalls, res.Requests, stallThreshold)
	}
}

// testLongLived keeps one HTTP/1.1 connection open across config changes; after each change it
// must still be answered, by the backend X it started on. New connections never reach a backend
// whose weight is 0.
func testLongLived(t *testing.T, f Flavor) {
	weights := map[int]int{1: 1, 2: 1}
	config := func() string { return f.Config(webService("maglev", pool(false, weights))) }
	applyFresh(t, config())
	vip := webService("", nil).Addr()

	conn := dialKeepAlive(t, vip)
	x, err := conn.get()
	if err != nil {
		t.Fatalf("first request: %v", err)
	}
	xi := backendIndex(x)
	t.Logf("the connection is on %s", x)
	step := func(what string) {
		t.Helper()
		apply(t, config())
		got, err := conn.get()
		if err != nil {
			t.Fatalf("after %s: request on the long-lived connection: %v", what, err)
		}
		if got != x {
			t.Fatalf("after %s: the long-lived connection answered from %s, want %s", what, got, x)
		}
	}

	weights[3] = 1
	step("adding b3")
	var others []int // the backends other than X, in order
	for i := 1; i <= labBackends; i++ {
		if i != xi {
			others = append(others, i)
		}
	}
	y, z := others[0], others[1]
	weights[y] = 0
	step(fmt.Sprintf("weighting b%d (not X) to 0", y))
	weights[xi] = 0
	step(fmt.Sprintf("weighting X=%s to 0", x))

	res := hammer(t, workers, drainedConns, func() (string, error) { return httpOnce(vip) })
	t.Logf("new connections with %s and b%d at weight 0: %v", x, y, res)
	res.requireNoFailures(t)
	if n := res.PerBackend[x] + res.PerBackend[lab.BackendName(y)]; n > 0 || res.PerBackend[lab.BackendName(z)] != res.Requests {
		t.Errorf("new connections reached weight-0 backends: %v (only b%d has weight)", res.PerBackend, z)
	}
	if got, err := conn.get(); err != nil || got != x {
		t.Fatalf("long-lived connection after the new connections: %q, %v", got, err)
	}

	delete(weights, y)
	step(fmt.Sprintf("removing b%d (not X)", y))
	if !f.KeepsFlowsOfRemovedBackends {
		// DSR remembers flow -> backend mark in an nft map; removing X from the config removes
		// its mark's mapping, so X's flows cannot survive it by design.
		t.Logf("not removing X: the %s flavor does not keep flows of removed backends", f.Name)
		return
	}
	delete(weights, xi)
	step(fmt.Sprintf("removing X=%s from the config", x))

	if !f.KeepsFlowsOfRemovedServices {
		t.Logf("not removing the service: the %s flavor does not keep flows of removed services", f.Name)
		return
	}
	apply(t, f.Config(dnsService(equalPool(false)))) // web removed, another service stays
	if got, err := conn.get(); err != nil || got != x {
		t.Fatalf("after removing the service: request on the long-lived connection: %q, %v; want %s", got, err, x)
	}
	if err := inClient(func() error { _, err := httpOnce(vip); return err }); err == nil {
		t.Error("a new connection to the removed service's VIP was answered")
	}
}

// backendIndex is N of "bN".
func backendIndex(name string) int {
	var i int
	fmt.Sscanf(name, "b%d", &i)
	return i
}

// testInvalidConfig: an invalid config is refused with its field path and line, and the kernel
// keeps what it had, byte for byte.
func testInvalidConfig(t *testing.T, f Flavor) {
	applyFresh(t, f.Config(webService("maglev", equalPool(false)), dnsService(equalPool(false))))
	before := kernelState(t, f) // no traffic until the comparison, so counters stay put
	if !strings.Contains(before, "10.91.9.100") {
		t.Fatalf("nothing applied:\n%s", before)
	}
	for _, c := range []struct {
		name, field, marker string
		backend             Backend
	}{
		{"bad-address", "services[0].backends[1].address", "10.91.2.300", Backend{Address: "10.91.2.300", Weight: 1}},
		{"bad-weight", "services[0].backends[1].weight", "weight: 5000", Backend{Address: "10.91.2.12", Weight: 5000}},
	} {
		t.Run(c.name, func(t *testing.T) {
			text := f.Config(webService("maglev", []Backend{{Address: "10.91.2.11", Weight: 1}, c.backend}))
			path := writeConfig(t, "bad.yaml", text)
			line := 1 + slices.IndexFunc(strings.Split(text, "\n"), func(l string) bool { return strings.Contains(l, c.marker) })
			r := sluice(t, "apply", "-f", path)
			var exit *exec.ExitError
			if !errors.As(r.Err, &exit) || exit.ExitCode() <= 0 {
				t.Fatalf("apply of an invalid config: %v, want a non-zero exit status\nstdout: %s\nstderr: %s", r.Err, r.Stdout, r.Stderr)
			}
			if want := fmt.Sprintf("%s:%d: %s:", path, line, c.field); !strings.Contains(r.Stderr, want) {
				t.Errorf("stderr %q does not name %q", r.Stderr, want)
			}
			if after := kernelState(t, f); after != before {
				t.Errorf("kernel state changed by a refused apply:\n%s", lineDiff(before, after))
			}
		})
	}
}

// testIPv6: a service on the IPv6 VIP over the backends' IPv6 addresses reaches every backend.
func testIPv6(t *testing.T, f Flavor) {
	svc := web6Service(equalPool(true))
	applyFresh(t, f.Config(svc))
	res := hammer(t, workers, ipv6Conns, func() (string, error) { return httpOnce(svc.Addr()) })
	t.Logf("ipv6 %s: %v", svc.Addr(), res)
	res.requireNoFailures(t)
	requireAllBackends(t, res)
}

// testUDP: request/response exchanges, each from a new socket (so a new source port), all get
// their reply from the VIP and reach every backend. For DSR the replies come straight from the
// backends (sent from the VIP they hold on lo) over the client's bypass leg.
func testUDP(t *testing.T, f Flavor) {
	svc := dnsService(equalPool(false))
	applyFresh(t, f.Config(svc))
	bypassBefore := bypassRxPackets(t)
	res := hammer(t, workers, udpExchanges, func() (string, error) { return udpOnce(svc.Addr()) })
	bypassed := bypassRxPackets(t) - bypassBefore
	t.Logf("udp %s: %v; %d packets arrived on the client's bypass leg", svc.Addr(), res, bypassed)
	res.requireNoFailures(t)
	requireAllBackends(t, res)
	if f.RepliesBypassBalancer && bypassed < uint64(res.Requests-res.Failures) {
		t.Errorf("%d replies but only %d packets on the client's bypass leg: replies did not come straight from the backends",
			res.Requests-res.Failures, bypassed)
	}
}

func requireAllBackends(t *testing.T, res *tally) {
	t.Helper()
	for i := 1; i <= labBackends; i++ {
		if res.PerBackend[lab.BackendName(i)] == 0 {
			t.Errorf("%s never answered: %v", lab.BackendName(i), res.PerBackend)
		}
	}
}

// testIdempotent: applying the same file twice leaves the ruleset byte-identical, also when
// traffic ran before the second apply and left runtime state (counters, DSR flow entries): an
// unchanged config must not touch what the kernel learned.
func testIdempotent(t *testing.T, f Flavor) {
	v4 := f.Config(webService("maglev", pool(false, map[int]int{1: 1, 2: 2, 3: 1})), dnsService(equalPool(false)))
	t.Run("ipv4", func(t *testing.T) { reapply(t, v4, nil) })
	t.Run("ipv6", func(t *testing.T) { reapply(t, f.Config(web6Service(equalPool(true))), nil) })
	t.Run("after-traffic", func(t *testing.T) {
		reapply(t, v4, func() {
			web, dns := webService("", nil).Addr(), dnsService(nil).Addr()
			http := hammer(t, workers, 100, func() (string, error) { return httpOnce(web) })
			udp := hammer(t, workers, 30, func() (string, error) { return udpOnce(dns) })
			http.requireNoFailures(t)
			udp.requireNoFailures(t)
		})
	})
}

// reapply applies a file on a flushed balancer, runs traffic (if any), and checks that applying
// the file again leaves the ruleset as it was. With traffic, counter values and the countdown of
// timed-out elements are masked: they move by themselves.
func reapply(t *testing.T, text string, traffic func()) {
	path := writeConfig(t, "sluice.yaml", text)
	flush(t)
	mustSluice(t, "apply", "-f", path)
	if traffic != nil {
		traffic()
	}
	first := ruleset(t)
	mustSluice(t, "apply", "-f", path)
	second := ruleset(t)
	requireCountersKept(t, first, second)
	if first, second = maskVolatile(first), maskVolatile(second); second != first {
		t.Errorf("second apply of the same file changed the ruleset:\n%s", lineDiff(first, second))
	}
}

// requireCountersKept fails when a counter of ruleset a is lower in b, the same ruleset listed
// later: an object made again starts from zero. Counters may grow meanwhile, as late segments of
// earlier tests' connections still cross the balancer.
func requireCountersKept(t *testing.T, a, b string) {
	t.Helper()
	before, after := countersRE.FindAllString(a, -1), countersRE.FindAllString(b, -1)
	if len(before) != len(after) {
		return // the rulesets differ; the comparison of their rules says how
	}
	for i := range before {
		var p1, b1, p2, b2 uint64
		fmt.Sscanf(before[i], "packets %d bytes %d", &p1, &b1)
		fmt.Sscanf(after[i], "packets %d bytes %d", &p2, &b2)
		if p2 < p1 || b2 < b1 {
			t.Errorf("counter %d went from %q to %q: an object was made again", i, before[i], after[i])
		}
	}
}

var (
	countersRE = regexp.MustCompile(`packets [0-9]+ bytes [0-9]+`)
	expiresRE  = regexp.MustCompile(` expires [0-9a-z.]+`)
)

func maskVolatile(ruleset string) string {
	return expiresRE.ReplaceAllString(countersRE.ReplaceAllString(ruleset, "packets N bytes N"), " expires T")
}

// lineDiff shows the lines only in a (-) or only in b (+), enough to read a ruleset change.
func lineDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	var out []string
	for _, l := range al {
		if !slices.Contains(bl, l) {
			out = append(out, "- "+l)
		}
	}
	for _, l := range bl {
		if !slices.Contains(al, l) {
			out = append(out, "+ "+l)
		}
	}
	if len(out) == 0 {
		return "(same lines, different order or repetition)"
	}
	const maxLines = 30
	if len(out) > maxLines {
		out = append(out[:maxLines], fmt.Sprintf("... and %d more lines", len(out)-maxLines))
	}
	return strings.Join(out, "\n")
}
