package e2e

import (
	"crypto/md5" //nolint:gosec // the digest check is keepalived's MD5 of a page, not a secret
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/lab"
)

// Ports of the servers the check tests start on the backends (nginx serves port 80).
const (
	httpsCheckPort = 8443
	smtpCheckPort  = 2525
	dnsCheckPort   = 5354
	udpCheckPort   = 5355
)

// checkFlipLimit bounds the wait for a probe to change state: a hang guard, not a timing
// assertion (the probes run every checkInterval).
const checkFlipLimit = 30 * time.Second

// checkCase is one check type on one backend of one service, and how the test makes the thing
// it checks fail and recover.
type checkCase struct {
	name    string
	service int    // index into checkServices
	backend int    // lab backend, 1..3
	check   string // the backend's health_check, a YAML flow mapping
	typ     string // the check's type as sluice health shows it
	// failure is what sluice health's last message holds while the check fails.
	failure string
	breakIt func(t *testing.T)
	fix     func(t *testing.T)
}

// checkServices are the services of the check tests, all on port 80 over every lab backend: the
// client's requests show which backends take new flows.
var checkServices = []string{"checks-a", "checks-b", "checks-c"}

// checkVIP is the VIP of checkServices[i]: 10.91.9.100, .101, .102.
func checkVIP(i int) netip.Addr {
	vip := netip.MustParseAddr(lab.VIP4).As4()
	vip[3] += byte(i)
	return netip.AddrFrom4(vip)
}

// TestNewChecks runs a daemon whose backends are checked each their own way, one backend per
// check type added for keepalived's checkers (http and https expect_digest, smtp, icmp, dns over
// udp and tcp, udp without a payload), against real servers on the lab's backends: nginx, and
// SMTP, DNS, HTTPS and UDP servers the test runs in the backends' namespaces. Every probe first
// passes. Then, one type at a time, the thing it checks breaks (a changed page, a 554 banner, a
// dropped echo request, SERVFAIL, a closed UDP port): sluice health shows the backend down after
// fall failures, with the reason, and new connections to its service avoid it; mended, it comes
// back up after rise successes and takes new connections again.
func TestNewChecks(t *testing.T) {
	requireLab(t)
	freshBalancer(t)
	t.Cleanup(func() { flush(t) })
	cases := startCheckServers(t)
	d := startDaemon(t, writeConfig(t, "sluice.yaml", checksConfig(cases)))
	for _, c := range cases {
		waitFor(t, c.name+" passing against its server", checkFlipLimit, func() bool {
			p := probeFor(d, c)
			return p.State == "up" && p.Successes >= checkRise
		})
	}
	// One case after another in this test, not as subtests: the daemon belongs to this test.
	for _, c := range cases {
		t.Logf("%s on %s:", c.name, lab.BackendName(c.backend))
		testCheckFallsAndRises(t, d, c)
	}
}

// testCheckFallsAndRises breaks what c checks, waits for the backend to go down and out of its
// service's table, checks that new connections avoid it, mends it and waits for it to come back.
func testCheckFallsAndRises(t *testing.T, d *daemon, c checkCase) {
	service, addr := checkServices[c.service], theLab.BackendAddr(c.backend, false).String()
	name := c.name + " on " + lab.BackendName(c.backend)
	backend := lab.BackendName(c.backend)
	c.breakIt(t)
	waitFor(t, name+" down", checkFlipLimit, func() bool { return probeFor(d, c).State == "down" })
	p := probeFor(d, c)
	t.Logf("%s down: %d failures in a row (fall %d), last: %s", name, p.Failures, checkFall, p.Message)
	if p.Failures < checkFall || !strings.Contains(p.Message, c.failure) {
		t.Errorf("%s down after %d failures (fall %d) with %q, want %q", name, p.Failures, checkFall, p.Message, c.failure)
	}
	waitFor(t, name+" out of "+service, checkFlipLimit, func() bool { return d.programmedWeight(service, addr) == 0 })
	res := checkTraffic(t, c.service)
	t.Logf("new connections to %s meanwhile: %v", service, res.PerBackend)
	res.requireNoFailures(t)
	if res.PerBackend[backend] > 0 {
		t.Errorf("%s is down but took new connections: %v", name, res.PerBackend)
	}

	c.fix(t)
	waitFor(t, name+" up", checkFlipLimit, func() bool { return probeFor(d, c).State == "up" })
	p = probeFor(d, c)
	t.Logf("%s up: %d successes in a row (rise %d), last: %s", name, p.Successes, checkRise, p.Message)
	if p.Successes < checkRise {
		t.Errorf("%s up after %d successes, want rise %d", name, p.Successes, checkRise)
	}
	waitFor(t, name+" back in "+service, checkFlipLimit, func() bool { return d.programmedWeight(service, addr) == 1 })
	res = checkTraffic(t, c.service)
	res.requireNoFailures(t)
	if res.PerBackend[backend] == 0 {
		t.Errorf("%s is up again but takes no new connection: %v", name, res.PerBackend)
	}
}

// checkConns is the number of new connections that show which backends of a service take flows.
const checkConns = 90

// checkTraffic makes new connections to checkServices[i] from the client.
func checkTraffic(t *testing.T, i int) *tally {
	t.Helper()
	to := netip.AddrPortFrom(checkVIP(i), 80)
	return hammer(t, workers, checkConns, func() (string, error) { return httpOnce(to) })
}

// checksConfig renders the check tests' config: every service over every lab backend, nat on
// nft, each backend of a case with the case's check.
func checksConfig(cases []checkCase) string {
	services := make([]Service, len(checkServices))
	for i, name := range checkServices {
		services[i] = Service{Name: name, VIP: checkVIP(i), Port: 80, Backends: equalPool(false)}
	}
	for _, c := range cases {
		services[c.service].Backends[c.backend-1].Extra = []string{"health_check: " + c.check}
	}
	return nftFlavors[0].Config(services...)
}

// timing is the probing keys every case's check shares.
var timing = fmt.Sprintf("interval: %v, timeout: %v, rise: %d, fall: %d", checkInterval, checkTimeout, checkRise, checkFall)

// startCheckServers starts the servers of every case on its backend and returns the cases.
func startCheckServers(t *testing.T) []checkCase {
	t.Helper()
	return []checkCase{
		nginxDigestCase(t),
		httpsDigestCase(t),
		smtpCase(t),
		icmpCase(t),
		dnsCase(t, 2, "udp"),
		dnsCase(t, 3, "tcp"),
		udpCase(t),
	}
}

// md5Hex is a body's digest as expect_digest writes it.
func md5Hex(body string) string {
	sum := md5.Sum([]byte(body)) //nolint:gosec // keepalived's digest
	return hex.EncodeToString(sum[:])
}

// Pages of the digest checks: the one the check expects, and the changed one.
const (
	goodPage    = "the page the digest was taken of\n"
	changedPage = "a page changed since\n"
)

// nginxDigestCase: an http check with expect_digest of a file nginx serves on b1; the file's
// content changes.
func nginxDigestCase(t *testing.T) checkCase {
	file := filepath.Join(theLab.StateDir, "www", "e2e-checks-digest.txt")
	write := func(t *testing.T, body string) {
		t.Helper()
		tmp := file + ".tmp"
		if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	write(t, goodPage)
	t.Cleanup(func() { os.Remove(file) })
	return checkCase{
		name: "http-digest", service: 0, backend: 1, typ: "http",
		check:   fmt.Sprintf("{type: http, path: /%s, expect_digest: %s, %s}", filepath.Base(file), md5Hex(goodPage), timing),
		failure: "body digest " + md5Hex(changedPage),
		breakIt: func(t *testing.T) { write(t, changedPage) },
		fix:     func(t *testing.T) { write(t, goodPage) },
	}
}

// httpsDigestCase: an https check with expect_digest of the page an HTTPS server on b2 serves;
// the page changes.
func httpsDigestCase(t *testing.T) checkCase {
	var changed atomic.Bool
	startHTTPS(t, 2, httpsCheckPort, func() string {
		if changed.Load() {
			return changedPage
		}
		return goodPage
	})
	return checkCase{
		name: "https-digest", service: 0, backend: 2, typ: "https",
		check: fmt.Sprintf("{type: https, port: %d, path: /page, expect_digest: %s, insecure_skip_verify: true, %s}",
			httpsCheckPort, md5Hex(goodPage), timing),
		failure: "body digest " + md5Hex(changedPage),
		breakIt: func(*testing.T) { changed.Store(true) },
		fix:     func(*testing.T) { changed.Store(false) },
	}
}

// smtpCase: an smtp check of an SMTP server on b3, whose banner turns to 554.
func smtpCase(t *testing.T) checkCase {
	s := startSMTP(t, 3, smtpCheckPort)
	return checkCase{
		name: "smtp", service: 0, backend: 3, typ: "smtp",
		check:   fmt.Sprintf("{type: smtp, port: %d, helo_name: lb.e2e.test, %s}", smtpCheckPort, timing),
		failure: "banner 554",
		breakIt: func(*testing.T) { s.refuse.Store(true) },
		fix:     func(*testing.T) { s.refuse.Store(false) },
	}
}

// icmpTable is the nft table that drops echo requests in a backend's namespace.
const icmpTable = "sluice_e2e_checks"

// icmpCase: an icmp check of b1, whose namespace then drops echo requests (an nft rule).
func icmpCase(t *testing.T) checkCase {
	ns := theLab.BackendNS(1)
	nft := func(t *testing.T, args ...string) {
		t.Helper()
		if r := run(t, "ip", append([]string{"netns", "exec", ns, "nft"}, args...)...); r.Err != nil {
			t.Fatalf("nft %s in %s: %v: %s", strings.Join(args, " "), ns, r.Err, r.Stderr)
		}
	}
	t.Cleanup(func() { run(t, "ip", "netns", "exec", ns, "nft", "delete", "table", "inet", icmpTable) })
	return checkCase{
		name: "icmp", service: 1, backend: 1, typ: "icmp",
		check:   "{type: icmp, " + timing + "}",
		failure: "no echo reply",
		breakIt: func(t *testing.T) {
			nft(t, "add", "table", "inet", icmpTable)
			nft(t, "add", "chain", "inet", icmpTable, "input", "{ type filter hook input priority 0; }")
			nft(t, "add", "rule", "inet", icmpTable, "input", "icmp", "type", "echo-request", "drop")
		},
		fix: func(t *testing.T) { nft(t, "delete", "table", "inet", icmpTable) },
	}
}

// dnsCase: a dns check over proto of a DNS server on backend i, which turns to SERVFAIL.
func dnsCase(t *testing.T, i int, proto string) checkCase {
	r := startDNS(t, i, dnsCheckPort)
	return checkCase{
		name: "dns-" + proto, service: 1, backend: i, typ: "dns",
		check: fmt.Sprintf("{type: dns, port: %d, query_name: www.example.com, query_type: A, query_protocol: %s, %s}",
			dnsCheckPort, proto, timing),
		failure: "rcode SERVFAIL",
		breakIt: func(*testing.T) { r.servfail.Store(true) },
		fix:     func(*testing.T) { r.servfail.Store(false) },
	}
}

// udpCase: a udp check without a payload of a UDP port on b1 that swallows datagrams; the port
// closes, so the kernel answers ICMP port unreachable. b1's namespace sends those without rate
// limit meanwhile, so that each probe of the closed port gets one.
func udpCase(t *testing.T) checkCase {
	setSysctl(t, theLab.BackendNS(1), "net.ipv4.icmp_ratelimit", "0")
	u := startSilentUDP(t, 1, udpCheckPort)
	return checkCase{
		name: "udp-no-payload", service: 2, backend: 1, typ: "udp",
		check:   fmt.Sprintf("{type: udp, port: %d, %s}", udpCheckPort, timing),
		failure: "refused",
		breakIt: func(*testing.T) { u.close() },
		fix:     func(*testing.T) { u.open() },
	}
}

// checkProbe is what `sluice health -o json` shows of one probe, decoded independently of the
// product's types.
type checkProbe struct {
	Type      string `json:"type"`
	Target    string `json:"target"`
	State     string `json:"state"`
	Successes int    `json:"successes"`
	Failures  int    `json:"failures"`
	Message   string `json:"last_message"`
}

// probeFor is the probe of c: its type on its backend's address (one per case).
func probeFor(d *daemon, c checkCase) checkProbe {
	d.t.Helper()
	var probes []checkProbe
	d.mustJSON(&probes, "health")
	addr := theLab.BackendAddr(c.backend, false)
	for _, p := range probes {
		if target, err := netip.ParseAddrPort(p.Target); err == nil && target.Addr() == addr && p.Type == c.typ {
			return p
		}
	}
	d.t.Fatalf("no %s probe of %s in sluice health: %+v", c.typ, addr, probes)
	return checkProbe{}
}
