package bench

// `sluice-lab bench flood`: legitimate one-request-per-connection load from the client while the
// attacker namespace floods the VIP with SYNs from forged random sources (hping3 --flood
// --rand-source), against the same load without the flood, per candidate. At the backends it
// counts the forged SYNs that reached them (an nft counter on their ingress), samples their
// half-open connections from forged sources, and reads their listen-queue counters (nstat).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/prometheus/procfs"
	"github.com/vishvananda/netlink"

	"github.com/sluicelb/sluice/internal/lab"
)

// FloodOptions configure `sluice-lab bench flood`.
type FloodOptions struct {
	// Duration is each phase's load run; Rounds how many times every candidate gets both phases.
	Duration time.Duration
	Rounds   int
	// Rate is the legitimate load's offered connections/s, each with one request; 0 runs wrk
	// closed-loop, as fast as it gets answers.
	Rate int
	// Candidates select by name; empty means all (all installed, for peers).
	Candidates []string
	// KeepLab leaves the lab up afterwards.
	KeepLab bool
}

// Check reports the first option out of range, naming its flag.
func (o FloodOptions) Check() error {
	return firstError(
		checkDuration("duration", o.Duration, time.Second),
		checkCount("rounds", o.Rounds, 1),
		checkCount("rate", o.Rate, 0),
	)
}

// FloodResults are what `sluice-lab bench flood` measured.
type FloodResults struct {
	Duration   string   `json:"duration"`
	Rounds     int      `json:"rounds"`
	Rate       int      `json:"offered_connections_per_second"`
	Backends   int      `json:"backends"`
	Flood      string   `json:"flood"`
	Candidates []string `json:"candidates"`
	// Missing are the peers that were not installed, so not measured.
	Missing []string    `json:"missing_peers,omitempty"`
	Cells   []FloodCell `json:"cells"`
}

// FloodCell is one candidate: medians over the rounds of each phase, the worst round's counts
// of what the flood left at the backends, and the rounds.
type FloodCell struct {
	Candidate  string `json:"candidate"`
	Protection string `json:"protection"`
	// RPS is the legitimate load's requests/s without the flood, FloodedRPS with it; Share is
	// FloodedRPS over RPS.
	RPS        float64 `json:"requests_per_second"`
	FloodedRPS float64 `json:"flooded_requests_per_second"`
	Share      float64 `json:"share"`
	// FloodPPS is the flood's rate into the balancer, packets/s (median).
	FloodPPS float64 `json:"flood_packets_per_second"`
	// Backends sums, over the backends, the highest of the rounds' flood-phase counts.
	Backends BackendCounts `json:"backends_under_flood"`
	Errors   int64         `json:"flooded_errors"`
	Rounds   []FloodSample `json:"rounds"`
}

// FloodSample is one round of one candidate: the load without the flood, then with it.
type FloodSample struct {
	Clean   FloodPhase `json:"clean"`
	Flooded FloodPhase `json:"flooded"`
}

// FloodPhase is one load run and what it left at the backends.
type FloodPhase struct {
	RPS      float64       `json:"requests_per_second"`
	P99US    float64       `json:"p99_us"`
	Errors   int64         `json:"errors"`
	FloodPPS float64       `json:"flood_packets_per_second"`
	Backends BackendCounts `json:"backends"`
}

// BackendCounts are the backends' counts over a phase, summed over the backends.
type BackendCounts struct {
	// ForgedSYNs are SYNs from outside the lab's addresses (the flood's) that reached a backend.
	ForgedSYNs int64 `json:"forged_syns"`
	// HalfOpenPeak is the most half-open (SYN_RECV) connections from such sources seen at once.
	HalfOpenPeak int64 `json:"half_open_peak"`
	// ListenDrops, ListenOverflows and SyncookiesSent are nstat's TcpExt counters' growth.
	ListenDrops     int64 `json:"listen_drops"`
	ListenOverflows int64 `json:"listen_overflows"`
	SyncookiesSent  int64 `json:"syncookies_sent"`
}

// FloodCandidateNames are the candidates `sluice-lab bench flood` knows, peers included.
func FloodCandidateNames() []string {
	var names []string
	for _, c := range floodCandidates() {
		names = append(names, c.Name())
	}
	return names
}

// floodCandidate is a candidate with what protects it against the flood, for the table.
type floodCandidate struct {
	candidate
	protection string
}

// floodCandidates are Sluice's nat datapaths with and without protection, then the peers that
// can be configured alike (the bare DNATs, nftlb dnat, HAProxy), installed or not.
func floodCandidates() []floodCandidate {
	out := []floodCandidate{
		{sluiceCandidate{datapath: "nft", mode: "nat"}, "none"},
		{synproxyCandidate{sluiceCandidate{datapath: "nft", mode: "nat"}}, "syn_protection (kernel synproxy)"},
		{sluiceCandidate{datapath: "ebpf", mode: "nat"}, "none"},
		{synproxyCandidate{sluiceCandidate{datapath: "ebpf", mode: "nat"}}, "syn_protection (the service handed to the kernel's synproxy)"},
	}
	for _, p := range Peers() {
		switch p.Name() {
		case "nft-dnat", "iptables-dnat", "iptables-legacy-dnat":
			out = append(out, floodCandidate{p, "none (bare DNAT)"})
		case "nftlb-dnat":
			out = append(out, floodCandidate{p, "none (nftlb farm, no synproxy)"})
		case "haproxy":
			out = append(out, floodCandidate{p, "proxy: its listener's SYN cookies"})
		}
	}
	return out
}

// selectFloodCandidates returns the candidates named (all for none) that can run here; missing
// are the peers not installed.
func selectFloodCandidates(names []string) (out []floodCandidate, missing []string, err error) {
	all := floodCandidates()
	for _, n := range names {
		if !slices.ContainsFunc(all, func(c floodCandidate) bool { return c.Name() == n }) {
			return nil, nil, fmt.Errorf("--candidates: unknown candidate %q; known: %s", n, strings.Join(FloodCandidateNames(), ", "))
		}
	}
	for _, c := range all {
		if p, ok := c.candidate.(peer); ok && !p.available() {
			if slices.Contains(names, c.Name()) {
				return nil, nil, fmt.Errorf("--candidates: %s is not installed (try --install-peers)", c.Name())
			}
			missing = append(missing, c.Name())
			continue
		}
		if len(names) == 0 || slices.Contains(names, c.Name()) {
			out = append(out, c)
		}
	}
	return out, missing, nil
}

// synproxyCandidate is Sluice with syn_protection (on ebpf the service goes to the nft datapath's
// synproxy, the program leaving its packets to the stack): the VIP on the balancer's loopback and
// nf_conntrack_tcp_loose=0 in its namespace, as the synproxy needs (docs/nftables-datapath.md).
type synproxyCandidate struct{ sluiceCandidate }

func (s synproxyCandidate) Name() string { return s.sluiceCandidate.Name() + "-synproxy" }

func (s synproxyCandidate) start(ctx context.Context, e *Env) error {
	if err := lab.SetSysctl(e.Lab.BalancerNS(), tcpLoose, "0"); err != nil {
		return err
	}
	if err := e.InNS(ctx, e.Lab.BalancerNS(), "ip", "addr", "replace", vipPrefix.String(), "dev", "lo"); err != nil {
		return err
	}
	return e.ApplyConfig(ctx, s.Name(), s.config(e)+"    syn_protection: true\n")
}

func (s synproxyCandidate) stop(ctx context.Context, e *Env) error {
	return errors.Join(e.ResetBalancer(ctx),
		e.InNS(ctx, e.Lab.BalancerNS(), "ip", "addr", "del", vipPrefix.String(), "dev", "lo"),
		lab.SetSysctl(e.Lab.BalancerNS(), tcpLoose, "1"))
}

// tcpLoose is the conntrack sysctl the synproxy needs off.
const tcpLoose = "net.netfilter.nf_conntrack_tcp_loose"

// floodWarmup is how long the flood runs before the load starts: the backends' SYN queues
// and the balancer's conntrack table fill within it.
const floodWarmup = time.Second

// floodCmd is the flood: SYNs to the VIP's port from random forged sources, as fast as hping3
// sends them.
var floodCmd = []string{"hping3", "-S", "-p", strconv.Itoa(vipPort), "--flood", "--rand-source", "-q", lab.VIP4}

// RunFlood brings up the lab with an attacker and gives every candidate, each round, the
// per-conn load without the flood and then with it (candidates interleaved, in balanced orders
// per round), then reports medians. o must pass Check.
func RunFlood(ctx context.Context, e *Env, o FloodOptions) (*FloodResults, error) {
	for _, bin := range []string{"wrk", "hping3", "nstat", "nft"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("%s not found (scripts/deps.sh installs it): %w", bin, err)
		}
	}
	candidates, missing, err := selectFloodCandidates(o.Candidates)
	if err != nil {
		return nil, err
	}
	samples := map[string][]FloodSample{}
	ports := portRanges{}
	e.Lab.Attacker = true
	err = e.InLab(ctx, o.KeepLab, func() error {
		if err := errors.Join(e.ResetBalancer(ctx), (&nftlbPeer{}).stop(ctx, e), e.countForgedSYNs(ctx)); err != nil {
			return err
		}
		return interleave(o.Rounds, len(candidates), func(round, i int) error {
			c := candidates[i]
			s, err := e.floodRound(ctx, c, o, &ports, roundLabel(round, o.Rounds))
			samples[c.Name()] = append(samples[c.Name()], s)
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	return summarizeFlood(o, e.Lab.Backends, candidates, missing, samples), nil
}

// floodRound sets c up, measures the load without and with the flood, and tears c down.
func (e *Env) floodRound(ctx context.Context, c floodCandidate, o FloodOptions, ports *portRanges, round string) (s FloodSample, err error) {
	e.Progress.Step("%s: setting up %s", round, c.Name())
	if err := c.start(ctx, e); err != nil {
		return s, fmt.Errorf("start %s: %w", c.Name(), err)
	}
	defer func() {
		if serr := c.stop(context.WithoutCancel(ctx), e); serr != nil {
			err = errors.Join(err, fmt.Errorf("stop %s: %w", c.Name(), serr))
		}
	}()
	for _, flooded := range []bool{false, true} {
		what := map[bool]string{false: "without flood", true: "under flood"}[flooded]
		e.Progress.Step("%s: %s, %s (%s)", round, c.Name(), what, o.Duration)
		p, err := e.floodPhase(ctx, c, o, ports, flooded)
		if err != nil {
			return s, fmt.Errorf("%s, %s: %w", c.Name(), what, err)
		}
		if flooded {
			s.Flooded = p
		} else {
			s.Clean = p
		}
	}
	return s, nil
}

// floodPhase runs the per-conn load against c, with the flood if flooded, and reads the
// backends' counts around it; then it clears what the flood left at the backends.
func (e *Env) floodPhase(ctx context.Context, c floodCandidate, o FloodOptions, ports *portRanges, flooded bool) (p FloodPhase, err error) {
	before, err := e.backendCounts(ctx)
	if err != nil {
		return p, err
	}
	rx0, err := attackerLinkPackets(e)
	if err != nil {
		return p, err
	}
	start := time.Now()
	var peak halfOpenPeak
	if flooded {
		stopFlood, err := e.startFlood(ctx, o.Duration+floodWarmup)
		if err != nil {
			return p, err
		}
		defer func() {
			// The flood's half-open connections would slow the next phase: clear them.
			err = errors.Join(err, e.clearHalfOpen(context.WithoutCancel(ctx)))
		}()
		stopSampling := peak.sample(e)
		defer stopSampling()
		defer stopFlood()
		time.Sleep(floodWarmup)
	}
	if err := e.Lab.SetClientPorts(ports.next(true)); err != nil {
		return p, err
	}
	s, err := e.runWrk(ctx, o.load(c.targets(e)))
	if err != nil {
		return p, err
	}
	rx1, err := attackerLinkPackets(e)
	if err != nil {
		return p, err
	}
	after, err := e.backendCounts(ctx)
	if err != nil {
		return p, err
	}
	p = FloodPhase{RPS: s.RPS(), P99US: s.P99US, Errors: s.Errors(), Backends: after.minus(before)}
	if flooded {
		p.FloodPPS = float64(rx1-rx0) / time.Since(start).Seconds()
		p.Backends.HalfOpenPeak = peak.value()
	}
	return p, nil
}

// load is the legitimate load: bench lb's per-conn workload (16 connections per backend, one
// request each), each connection pausing between requests when paced at o.Rate.
func (o FloodOptions) load(targets []netip.AddrPort) wrkLoad {
	w := wrkLoad{Targets: targets, Threads: len(targets), Conns: 16 * len(targets), Path: "/", Close: true, Duration: o.Duration}
	if o.Rate > 0 {
		w.Pace = time.Duration(w.Conns) * time.Second / time.Duration(o.Rate)
	}
	return w
}

// startFlood starts the flood from the attacker namespace for at most d (killed then, or by
// the returned stop, whichever comes first).
func (e *Env) startFlood(ctx context.Context, d time.Duration) (stop func(), err error) {
	fctx, cancel := context.WithTimeout(ctx, d)
	cmd := e.Lab.Exec(fctx, e.Lab.AttackerNS(), floodCmd...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("%s: %w", strings.Join(floodCmd, " "), err)
	}
	return func() {
		cancel()
		_ = cmd.Wait() // killed: its exit status says so
	}, nil
}

// attackerLinkPackets is the count of packets the balancer received from the attacker.
func attackerLinkPackets(e *Env) (uint64, error) {
	var n uint64
	err := lab.WithHandle(e.Lab.BalancerNS(), func(h *netlink.Handle) error {
		link, err := h.LinkByName("eth2")
		if err == nil {
			n = link.Attrs().Statistics.RxPackets
		}
		return err
	})
	return n, err
}

// labNet holds every address of the lab; the flood's forged sources are outside it.
const labNet = "10.91.0.0/16"

// forgedTable is the nft table in each backend namespace that counts forged SYNs on ingress.
const forgedTable = "sluice-bench-flood"

// countForgedSYNs sets up, in every backend namespace, a counter of the SYNs from outside the
// lab's addresses that arrive on eth0.
func (e *Env) countForgedSYNs(ctx context.Context) error {
	rules := fmt.Sprintf(`table netdev %[1]s {
	counter forged {}
	chain in {
		type filter hook ingress device eth0 priority 0;
		ip saddr != %[2]s tcp flags & (syn | ack) == syn counter name forged
	}
}
`, forgedTable, labNet)
	for i := 1; i <= e.Lab.Backends; i++ {
		cmd := e.Lab.Exec(ctx, e.Lab.BackendNS(i), "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(rules)
		if err := run(cmd); err != nil {
			return err
		}
	}
	return nil
}

var counterPackets = regexp.MustCompile(`packets (\d+)`)

// backendCounts reads, in every backend, the forged SYN counter and nstat's listen counters, summed.
func (e *Env) backendCounts(ctx context.Context) (BackendCounts, error) {
	var sum BackendCounts
	for i := 1; i <= e.Lab.Backends; i++ {
		ns := e.Lab.BackendNS(i)
		out, err := e.Lab.Exec(ctx, ns, "nft", "list", "counter", "netdev", forgedTable, "forged").CombinedOutput()
		if err != nil {
			return sum, fmt.Errorf("forged SYN counter in %s: %w: %s", ns, err, out)
		}
		m := counterPackets.FindSubmatch(out)
		if m == nil {
			return sum, fmt.Errorf("forged SYN counter in %s: no packet count in %q", ns, out)
		}
		n, _ := strconv.ParseInt(string(m[1]), 10, 64)
		sum.ForgedSYNs += n
		out, err = e.Lab.Exec(ctx, ns, "nstat", "-asz", "TcpExtListenDrops", "TcpExtListenOverflows", "TcpExtSyncookiesSent").Output()
		if err != nil {
			return sum, fmt.Errorf("nstat in %s: %w", ns, err)
		}
		c := parseNstat(string(out))
		sum.ListenDrops += c["TcpExtListenDrops"]
		sum.ListenOverflows += c["TcpExtListenOverflows"]
		sum.SyncookiesSent += c["TcpExtSyncookiesSent"]
	}
	return sum, nil
}

// parseNstat reads nstat's "NAME VALUE RATE" lines.
func parseNstat(out string) map[string]int64 {
	m := map[string]int64{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 {
			if v, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				m[f[0]] = v
			}
		}
	}
	return m
}

// minus is the growth of the counters from before to c (HalfOpenPeak is not a counter: kept).
func (c BackendCounts) minus(before BackendCounts) BackendCounts {
	return BackendCounts{
		ForgedSYNs:      c.ForgedSYNs - before.ForgedSYNs,
		HalfOpenPeak:    c.HalfOpenPeak,
		ListenDrops:     c.ListenDrops - before.ListenDrops,
		ListenOverflows: c.ListenOverflows - before.ListenOverflows,
		SyncookiesSent:  c.SyncookiesSent - before.SyncookiesSent,
	}
}

// clearHalfOpen destroys the half-open connections of every backend (`ss -K`), so that no
// phase inherits the flood's SYN_RECV entries, which live for a minute of SYN-ACK retries.
func (e *Env) clearHalfOpen(ctx context.Context) error {
	var errs []error
	for i := 1; i <= e.Lab.Backends; i++ {
		errs = append(errs, e.InNS(ctx, e.Lab.BackendNS(i), "ss", "-K", "-t", "state", "syn-recv"))
	}
	return errors.Join(errs...)
}

// halfOpenPeak is the highest count of the backends' half-open connections from forged sources,
// summed over the backends, seen by sampling.
type halfOpenPeak struct {
	mu   sync.Mutex
	peak int64
}

// halfOpenSample is how often the backends' half-open connections are counted.
const halfOpenSample = 200 * time.Millisecond

// sample counts every halfOpenSample until the returned stop, which waits for the last count.
func (h *halfOpenPeak) sample(e *Env) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(halfOpenSample)
		defer tick.Stop()
		for {
			var n int64
			for i := 1; i <= e.Lab.Backends; i++ {
				c, err := forgedHalfOpen(e, e.Lab.BackendNS(i))
				if err == nil {
					n += c
				}
			}
			h.mu.Lock()
			h.peak = max(h.peak, n)
			h.mu.Unlock()
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

func (h *halfOpenPeak) value() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.peak
}

// forgedHalfOpen counts the IPv4 TCP sockets of namespace ns in SYN_RECV whose peer is outside
// the lab's addresses, from the namespace's /proc/net/tcp.
func forgedHalfOpen(e *Env, ns string) (int64, error) {
	var tcp procfs.NetTCP
	err := e.Lab.Do(ns, func() error {
		// /proc/thread-self/net is the namespace of the thread Do switched, not of the process.
		fs, err := procfs.NewFS(filepath.Join(procfs.DefaultMountPoint, "thread-self"))
		if err != nil {
			return err
		}
		tcp, err = fs.NetTCP()
		return err
	})
	if err != nil {
		return 0, err
	}
	return countForgedHalfOpen(tcp), nil
}

// tcpSynRecv is TCP_SYN_RECV, a half-open connection's state in /proc/net/tcp.
const tcpSynRecv = 0x03

// countForgedHalfOpen counts the sockets of a /proc/net/tcp in state SYN_RECV whose remote
// address is outside labNet.
func countForgedHalfOpen(tcp procfs.NetTCP) int64 {
	inLab := netip.MustParsePrefix(labNet)
	var n int64
	for _, s := range tcp {
		addr, ok := netip.AddrFromSlice(s.RemAddr)
		if s.St == tcpSynRecv && ok && !inLab.Contains(addr.Unmap()) {
			n++
		}
	}
	return n
}

// summarizeFlood turns the rounds into cells: medians of each phase, their ratio, and the
// worst round's backend counts under the flood.
func summarizeFlood(o FloodOptions, backends int, candidates []floodCandidate, missing []string, samples map[string][]FloodSample) *FloodResults {
	res := &FloodResults{Duration: o.Duration.String(), Rounds: o.Rounds, Rate: o.Rate, Backends: backends,
		Flood: strings.Join(floodCmd, " "), Missing: missing}
	for _, c := range candidates {
		ss := samples[c.Name()]
		res.Candidates = append(res.Candidates, c.Name())
		cell := FloodCell{Candidate: c.Name(), Protection: c.protection, Rounds: ss,
			RPS:        Median(pluck(ss, func(s FloodSample) float64 { return s.Clean.RPS })),
			FloodedRPS: Median(pluck(ss, func(s FloodSample) float64 { return s.Flooded.RPS })),
			FloodPPS:   Median(pluck(ss, func(s FloodSample) float64 { return s.Flooded.FloodPPS })),
		}
		cell.Share = ratio(cell.FloodedRPS, cell.RPS)
		for _, s := range ss {
			b := s.Flooded.Backends
			cell.Backends.ForgedSYNs = max(cell.Backends.ForgedSYNs, b.ForgedSYNs)
			cell.Backends.HalfOpenPeak = max(cell.Backends.HalfOpenPeak, b.HalfOpenPeak)
			cell.Backends.ListenDrops = max(cell.Backends.ListenDrops, b.ListenDrops)
			cell.Backends.ListenOverflows = max(cell.Backends.ListenOverflows, b.ListenOverflows)
			cell.Backends.SyncookiesSent = max(cell.Backends.SyncookiesSent, b.SyncookiesSent)
			cell.Errors += s.Flooded.Errors
		}
		res.Cells = append(res.Cells, cell)
	}
	return res
}

// Table renders the results for people.
func (r *FloodResults) Table() string {
	var b strings.Builder
	offered := "closed-loop"
	if r.Rate > 0 {
		offered = fmt.Sprintf("offered %d/s", r.Rate)
	}
	fmt.Fprintf(&b, "sluice-lab bench flood: %d backends, %d round(s) of %s per phase, legitimate load %s, medians\n\n", r.Backends, r.Rounds, r.Duration, offered)
	rows := [][]string{{"CANDIDATE", "REQ/S", "FLOODED", "SHARE", "FLOOD PPS", "FORGED SYNS", "HALF-OPEN", "DROPS", "OVERFLOWS", "COOKIES", "ERRORS", "PROTECTION"}}
	for _, c := range r.Cells {
		rows = append(rows, []string{c.Candidate, thousands(c.RPS), thousands(c.FloodedRPS), fmt.Sprintf("%.1f%%", 100*c.Share),
			thousands(c.FloodPPS), strconv.FormatInt(c.Backends.ForgedSYNs, 10), strconv.FormatInt(c.Backends.HalfOpenPeak, 10),
			strconv.FormatInt(c.Backends.ListenDrops, 10), strconv.FormatInt(c.Backends.ListenOverflows, 10),
			strconv.FormatInt(c.Backends.SyncookiesSent, 10), strconv.FormatInt(c.Errors, 10), c.Protection})
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, row := range rows {
		// The last column, unterminated, is left as it is: protection is words, not a figure.
		fmt.Fprintln(tw, strings.Join(row[:len(row)-1], "\t")+"\t  "+row[len(row)-1])
	}
	_ = tw.Flush()
	fmt.Fprintf(&b, `
load: wrk from the client, one request per connection, 16 connections per backend; flood: %s from the attacker namespace,
  started %s before the load and stopped after it.
REQ/S, FLOODED: legitimate requests/s without and under the flood; SHARE: FLOODED / REQ/S.
FLOOD PPS: packets/s the balancer received from the attacker.
At the backends under the flood (summed over them, the worst round): FORGED SYNS reached them (from
  outside the lab's addresses); HALF-OPEN is the most SYN_RECV connections from such sources at once
  (sampled every %s); DROPS, OVERFLOWS, COOKIES: growth of nstat TcpExtListenDrops,
  TcpExtListenOverflows, TcpExtSyncookiesSent. ERRORS: wrk's failed requests under the flood.
`, r.Flood, floodWarmup, halfOpenSample)
	if len(r.Missing) > 0 {
		fmt.Fprintf(&b, "not installed, not measured: %s (--install-peers)\n", strings.Join(r.Missing, ", "))
	}
	return b.String()
}
