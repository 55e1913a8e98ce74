package bench

// `sluice-lab bench pps`: packets per second the way the field measures a balancer (the XDP paper's
// method: one VIP, 100 reals, small UDP packets from many source ports). trafgen in the client
// namespace, on CPU 0, sends 60-byte frames as fast as it can, for a set time, to the VIP or, for
// the direct baseline, to the reals themselves. A veth hands a frame to its peer on the sending
// CPU, so the balancer, the switch and the backends' ingress all forward it on CPU 0, within
// the send: the generator is paced by the path it drives. The reals are 100 addresses spread
// over the lab's backend namespaces, which drop the packets at their ingress (nft netdev hook,
// or XDP with --switch xdp) so that no backend stack becomes the bottleneck. What the client's veth sent and what the
// backends' veths received give the forwarded rate and the drop share; /proc/stat gives CPU 0's
// kernel time.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/sluicelb/sluice/internal/lab"
)

// PPSOptions configure `sluice-lab bench pps`.
type PPSOptions struct {
	// Duration is each send's length; Rounds how many times every candidate gets every workload.
	Duration time.Duration
	Rounds   int
	// Workloads and Candidates select by name; empty means all (all installed, for peers).
	Workloads  []string
	Candidates []string
	// Switch is how the lab's switch and the backends take frames, for every candidate alike.
	Switch Switch
	// Steer gives the balancer CPU 1 to itself (threaded NAPI) and drives it with Sluice's own sender on
	// CPU 0, so that CPU 1's busy time is the balancer's alone (see pps_steer.go).
	Steer bool
	// Against names a candidate measured in the run: every other candidate's forwarded packets/s
	// per core is also given over its own, round by round (PairedRatio).
	Against string
	// KeepLab leaves the lab up afterwards.
	KeepLab bool
}

// Check reports the first option out of range, naming its flag.
func (o PPSOptions) Check() error {
	errs := []error{checkDuration("duration", o.Duration, time.Second), checkCount("rounds", o.Rounds, 1), checkSwitch(o.Switch)}
	if len(o.Workloads) > 0 {
		errs = append(errs, checkOneOf("workloads", "workload", o.Workloads, ppsWorkloadNames))
	}
	if len(o.Candidates) > 0 {
		errs = append(errs, checkOneOf("candidates", "candidate", o.Candidates, PPSCandidateNames()))
	}
	return firstError(errs...)
}

// ppsReals is how many real servers the VIP has, as in the XDP paper's IPVS comparison.
const ppsReals = 100

// ppsFrameLen is the length of every generated frame: Ethernet's minimum without the FCS.
const ppsFrameLen = 60

// PPSResults are what `sluice-lab bench pps` measured.
type PPSResults struct {
	Duration string `json:"duration"`
	Rounds   int    `json:"rounds"`
	Reals    int    `json:"reals"`
	// BackendNamespaces hold the reals, round-robin.
	BackendNamespaces int    `json:"backend_namespaces"`
	FrameBytes        int    `json:"frame_bytes"`
	Generator         string `json:"generator"`
	// CPU is the CPU whose time is measured: the generator's, with the whole path on it, or with
	// Steered the balancer's alone.
	CPU     int  `json:"cpu"`
	Steered bool `json:"steered,omitempty"`
	// Switch is how the lab's switch and the backends took frames: stack or xdp.
	Switch     Switch   `json:"switch"`
	Workloads  []string `json:"workloads"`
	Candidates []string `json:"candidates"`
	// Missing are the peers that were not installed, so not measured.
	Missing []string `json:"missing_peers,omitempty"`
	// Against is the candidate the cells' paired ratios are to (--against), if any.
	Against string    `json:"against,omitempty"`
	Cells   []PPSCell `json:"cells"`
}

// PPSCell is one candidate under one workload: medians over the rounds, and the rounds.
type PPSCell struct {
	Candidate string `json:"candidate"`
	Workload  string `json:"workload"`
	// SentPPS is what the generator put on the wire, ForwardedPPS what reached the backends.
	SentPPS      float64 `json:"sent_pps"`
	ForwardedPPS float64 `json:"forwarded_pps"`
	// DropShare is the share of the sent packets that never reached a backend.
	DropShare float64 `json:"drop_share"`
	// KernelCores is CPU 0's system+irq+softirq time during the send, in cores (at most 1);
	// PPSPerCore is ForwardedPPS over it.
	KernelCores float64 `json:"kernel_cpu_cores"`
	PPSPerCore  float64 `json:"forwarded_pps_per_core"`
	// Ratio is ForwardedPPS over direct's; RatioPerCore is PPSPerCore over direct's.
	Ratio        float64 `json:"ratio_to_direct"`
	RatioPerCore float64 `json:"per_core_ratio_to_direct"`
	// AddedNS is the CPU time a packet costs over direct's, in ns: 1/PPSPerCore less direct's.
	// The path's shared part (generator, switch, backends) cancels out.
	AddedNS float64 `json:"added_ns_per_packet"`
	// Paired is the forwarded packets/s per core over the --against candidate's, round by round.
	Paired *PairedRatio `json:"paired_ratio,omitempty"`
	Rounds []PPSSample  `json:"rounds"`
}

// generatorRestarts is how often trafgen was started again over the cell's rounds.
func (c PPSCell) generatorRestarts() (n int) {
	for _, s := range c.Rounds {
		n += s.GeneratorRestarts
	}
	return n
}

// PPSSample is one send of one workload through one candidate.
type PPSSample struct {
	Seconds     float64 `json:"seconds"`
	Sent        int64   `json:"sent"`
	Arrived     int64   `json:"arrived"`
	KernelCores float64 `json:"kernel_cpu_cores"`
	// GeneratorRestarts counts how often trafgen was started again in the window (see sendPPS).
	GeneratorRestarts int `json:"generator_restarts,omitempty"`
}

func (s PPSSample) sentPPS() float64      { return ratio(float64(s.Sent), s.Seconds) }
func (s PPSSample) forwardedPPS() float64 { return ratio(float64(s.Arrived), s.Seconds) }
func (s PPSSample) dropShare() float64    { return max(0, 1-ratio(float64(s.Arrived), float64(s.Sent))) }
func (s PPSSample) perCore() float64      { return ratio(s.forwardedPPS(), s.KernelCores) }

// ppsWorkload is what the generator sends: the layer-4 part of its trafgen packet.
type ppsWorkload struct {
	name, what string
	// l4 is the trafgen header after IPv4 (proto header syntax); srcs the IPv4 source fields.
	l4, srcs string
}

// The workloads' sources: the client's address for udp, a /16 outside the lab for syn.
const (
	ppsUDPSource  = "10.91.1.2"
	ppsSYNSources = "10.200.0.0/16"
)

// ppsWorkloads are named as `sluice-lab pps-sender --kind` names them.
var ppsWorkloads = []ppsWorkload{
	{"udp", "UDP to port 80 from one source address, random source ports",
		"udp(sp=drnd(1024, 65535), dp=80)", "sa=" + ppsUDPSource},
	{"syn", "TCP SYN to port 80 from random sources in " + ppsSYNSources + " and ports: every packet a new flow",
		"tcp(sp=drnd(1024, 65535), dp=80, syn, seq=drnd())", "sa=10.200.0.0, sa[2]=drnd(), sa[3]=drnd()"},
}

var ppsWorkloadNames = func() []string {
	var names []string
	for _, w := range ppsWorkloads {
		names = append(names, w.name)
	}
	return names
}()

// ppsCandidate is one way through the balancer namespace.
type ppsCandidate interface {
	Name() string
	start(ctx context.Context, e *Env) error
	stop(ctx context.Context, e *Env) error
}

// ppsDirect is the baseline: the generator sends to the reals themselves, routed by the
// balancer namespace with no balancing.
type ppsDirect struct{}

func (ppsDirect) Name() string                      { return "direct" }
func (ppsDirect) start(context.Context, *Env) error { return nil }
func (ppsDirect) stop(context.Context, *Env) error  { return nil }

// ppsSluice is Sluice with one datapath, mode and attach point, serving the VIP over UDP and
// TCP with the 100 reals.
type ppsSluice struct {
	datapath, mode, attach string
	optOuts                nftOptOuts
}

func (s ppsSluice) Name() string { return sluiceName(s.datapath, s.mode, s.attach, s.optOuts) }

func (s ppsSluice) start(ctx context.Context, e *Env) error {
	if s.attach == "xdp" {
		if err := setCandidateXDP(e, true); err != nil {
			return err
		}
	}
	var b strings.Builder
	writeSluiceHeader(&b, s.datapath, s.attach, s.optOuts)
	b.WriteString("services:\n")
	for _, proto := range []string{"udp", "tcp"} {
		fmt.Fprintf(&b, "  - name: pps-%s\n    vip: %s\n    port: %d\n    protocol: %s\n    mode: %s\n    backends:\n", proto, lab.VIP4, vipPort, proto, s.mode)
		for _, r := range ppsRealAddrs() {
			fmt.Fprintf(&b, "      - address: %s\n", r)
		}
	}
	return e.ApplyConfig(ctx, s.Name(), b.String())
}

func (s ppsSluice) stop(ctx context.Context, e *Env) error {
	err := e.ResetBalancer(ctx)
	if s.attach == "xdp" {
		err = errors.Join(err, setCandidateXDP(e, false))
	}
	return err
}

// ppsNftlb is nftlb in dnat mode with a UDP and a TCP farm on the VIP over the 100 reals.
type ppsNftlb struct{ *nftlbPeer }

func (p ppsNftlb) start(ctx context.Context, e *Env) error {
	var farms []nftlbFarm
	for _, proto := range []string{"udp", "tcp"} {
		farm := nftlbFarm{Name: "pps-" + proto, Family: "ipv4", VIP: lab.VIP4, Ports: fmt.Sprint(vipPort),
			Protocol: proto, Mode: p.mode, Sched: "hash", Param: "srcip srcport", State: "up"}
		for i, r := range ppsRealAddrs() {
			farm.Backends = append(farm.Backends, nftlbBackend{Name: fmt.Sprintf("r%d", i+1), IP: r.String(), Port: fmt.Sprint(vipPort), State: "up"})
		}
		farms = append(farms, farm)
	}
	conf, err := json.MarshalIndent(map[string][]nftlbFarm{"farms": farms}, "", "  ")
	if err != nil {
		return err
	}
	return p.apply(ctx, e, conf)
}

// ppsIptables is iptables DNAT: one rule per protocol whose target is the range of the reals'
// addresses, among which netfilter's NAT picks by a hash of the flow (its cheapest spreading,
// with no rule per real). It was iptables-dnat before that name went to kube-proxy's layout.
type ppsIptables struct{}

func (ppsIptables) Name() string    { return "iptables-dnat-range" }
func (ppsIptables) available() bool { return installed("iptables") }

func (ppsIptables) start(ctx context.Context, e *Env) error {
	reals := ppsRealAddrs()
	to := fmt.Sprintf("%s-%s", reals[0], reals[len(reals)-1])
	for _, proto := range []string{"udp", "tcp"} {
		if err := e.InNS(ctx, e.Lab.BalancerNS(), "iptables", "-t", "nat", "-A", "PREROUTING", "-d", lab.VIP4,
			"-p", proto, "--dport", fmt.Sprint(vipPort), "-j", "DNAT", "--to-destination", to); err != nil {
			return err
		}
	}
	return nil
}

// stop flushes the nat table and, with iptables-nft, removes it, so that no empty NAT hook
// stays registered for the candidates after it.
func (ppsIptables) stop(ctx context.Context, e *Env) error {
	ns := e.Lab.BalancerNS()
	err := e.InNS(ctx, ns, "iptables", "-t", "nat", "-F")
	_ = e.InNS(ctx, ns, "nft", "delete", "table", "ip", "nat") // absent with iptables-legacy
	return errors.Join(err, flushConntrack(ns))
}

// ppsCandidates are direct, Sluice's datapaths in nat and dsr (ebpf at tc and at XDP, and in
// tunnel, whose IPIP packets the backends count and drop like the others), then
// the peers nftlb dnat and iptables DNAT to a range, and the bare baselines (bare.go) but
// masquerade, installed or not.
func ppsCandidates() []ppsCandidate {
	out := []ppsCandidate{ppsDirect{}}
	for _, dp := range []string{"nft", "ebpf"} {
		for _, attach := range []string{"", "xdp"} {
			if dp == "nft" && attach != "" {
				continue
			}
			for _, mode := range []string{"nat", "dsr", "tunnel"} {
				if mode == "tunnel" && dp != "ebpf" {
					continue // only the ebpf datapath encapsulates
				}
				out = append(out, ppsSluice{datapath: dp, mode: mode, attach: attach})
			}
		}
	}
	out = append(out, ppsNftlb{&nftlbPeer{mode: "dnat"}}, ppsIptables{})
	for _, c := range bareCandidates(ppsSpread) {
		if c.Name() != (bareNft{kind: bareMasq}).Name() {
			out = append(out, c)
		}
	}
	return out
}

// ppsOnRequest are candidates measured only when named: nft nat with nft.packet_counters off,
// and with every opt-out.
var ppsOnRequest = []ppsCandidate{ppsSluice{datapath: "nft", mode: "nat", optOuts: uncounted}, ppsSluice{datapath: "nft", mode: "nat", optOuts: lean}}

// PPSCandidateNames are the candidates `sluice-lab bench pps` knows, peers and those on request
// included.
func PPSCandidateNames() []string {
	var names []string
	for _, c := range append(ppsCandidates(), ppsOnRequest...) {
		names = append(names, c.Name())
	}
	return names
}

// selectPPS returns the candidates named (direct always) and installed, and the peers missing;
// without names, every candidate but those on request.
func selectPPS(names []string) (out []ppsCandidate, missing []string, err error) {
	for _, c := range append(ppsCandidates(), ppsOnRequest...) {
		named := slices.Contains(names, c.Name())
		onRequest := slices.ContainsFunc(ppsOnRequest, func(r ppsCandidate) bool { return r.Name() == c.Name() })
		wanted := named || c.Name() == (ppsDirect{}).Name() || len(names) == 0 && !onRequest
		if p, ok := c.(interface{ available() bool }); ok && !p.available() {
			if len(names) > 0 && slices.Contains(names, c.Name()) {
				return nil, nil, fmt.Errorf("--candidates: %s is not installed", c.Name())
			}
			missing = append(missing, c.Name())
			continue
		}
		if wanted {
			out = append(out, c)
		}
	}
	return out, missing, nil
}

// ppsRealAddrs are the reals: 10.91.2.11 to 10.91.2.110, on the backends' segment.
func ppsRealAddrs() []netip.Addr {
	out := make([]netip.Addr, ppsReals)
	for k := range out {
		out[k] = netip.AddrFrom4([4]byte{10, 91, 2, byte(11 + k)})
	}
	return out
}

// realNS is the index of the backend namespace holding real k (0-based): round-robin, so that
// backend i's own address, 10.91.2.(10+i), is real i-1.
func realNS(k, backends int) int { return k%backends + 1 }

// RunPPS brings up the lab, makes the reals, and sends every workload through every candidate,
// candidates interleaved within each round (in balanced orders: interleave), then reports medians.
// o must pass Check.
func RunPPS(ctx context.Context, e *Env, o PPSOptions) (*PPSResults, error) {
	if !o.Steer && !installed("trafgen") {
		return nil, errors.New("trafgen not found (Debian package netsniff-ng; scripts/deps.sh installs it)")
	}
	workloads := slices.DeleteFunc(slices.Clone(ppsWorkloads), func(w ppsWorkload) bool {
		return len(o.Workloads) > 0 && !slices.Contains(o.Workloads, w.name)
	})
	candidates, missing, err := selectPPS(o.Candidates)
	if err != nil {
		return nil, err
	}
	if err := checkAgainst(o.Against, candidates); err != nil {
		return nil, err
	}
	samples := map[[2]string][]PPSSample{}
	err = e.InLab(ctx, o.KeepLab, func() (err error) {
		if err := errors.Join(e.ResetBalancer(ctx), (&nftlbPeer{}).stop(ctx, e)); err != nil {
			return err
		}
		e.Progress.Step("making %d reals on %d backend namespaces", ppsReals, e.Lab.Backends)
		if err := makeReals(ctx, e); err != nil {
			return err
		}
		stopSwitch, err := startSwitch(e, o.Switch, true)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, stopSwitch()) }()
		if o.Steer {
			unsteer, err := steerBalancer(ctx, e)
			if err != nil {
				return err
			}
			defer func() { err = errors.Join(err, unsteer()) }()
		}
		return interleave(o.Rounds, len(candidates), func(round, i int) error {
			c := candidates[i]
			return e.measurePPS(ctx, c, workloads, o, roundLabel(round, o.Rounds), func(w string, s PPSSample) {
				samples[[2]string{c.Name(), w}] = append(samples[[2]string{c.Name(), w}], s)
			})
		})
	})
	if err != nil {
		return nil, err
	}
	return summarizePPS(e.Lab.Backends, o, workloads, candidates, missing, samples), nil
}

// measurePPS sets candidate c up, sends every workload through it and tears it down.
func (e *Env) measurePPS(ctx context.Context, c ppsCandidate, workloads []ppsWorkload, o PPSOptions, round string, record func(string, PPSSample)) (err error) {
	e.Progress.Step("%s: setting up %s", round, c.Name())
	if err := c.start(ctx, e); err != nil {
		return errors.Join(fmt.Errorf("start %s: %w", c.Name(), err), c.stop(context.WithoutCancel(ctx), e))
	}
	defer func() {
		if serr := c.stop(context.WithoutCancel(ctx), e); serr != nil {
			err = errors.Join(err, fmt.Errorf("stop %s: %w", c.Name(), serr))
		}
	}()
	_, direct := c.(ppsDirect)
	for _, w := range workloads {
		e.Progress.Step("%s: %s, %s (%s)", round, c.Name(), w.name, o.Duration)
		send := e.sendPPS
		if o.Steer {
			send = e.sendSteered
		}
		s, err := send(ctx, w, direct, o.Duration)
		if err != nil {
			return fmt.Errorf("%s, %s: %w", c.Name(), w.name, err)
		}
		record(w.name, s)
	}
	return nil
}

// makeReals puts the reals on the backends' eth0 (round-robin; the first ones are the backends'
// own addresses), gives the balancer permanent neighbour entries for them (no ARP during a
// send; XDP drops a dsr packet whose neighbour is unresolved), and makes every backend drop
// port 80 and IPIP (a tunnel candidate's packets) at its ingress, where its veth has already
// counted the packet.
func makeReals(ctx context.Context, e *Env) error {
	macs := make([]net.HardwareAddr, e.Lab.Backends+1)
	dir := filepath.Join(e.Dir(), "pps")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	drop := filepath.Join(dir, "drop.nft")
	if err := os.WriteFile(drop, []byte(`table netdev sluice_pps {
	chain ingress {
		type filter hook ingress device "eth0" priority -500; policy accept;
		meta l4proto { tcp, udp } th dport 80 drop
		meta l4proto 4 drop
	}
}
`), 0o644); err != nil {
		return err
	}
	for i := 1; i <= e.Lab.Backends; i++ {
		if err := e.InNS(ctx, e.Lab.BackendNS(i), "nft", "-f", drop); err != nil {
			return err
		}
		mac, err := macOf(e, e.Lab.BackendNS(i), "eth0")
		if err != nil {
			return err
		}
		if macs[i], err = net.ParseMAC(mac); err != nil {
			return err
		}
	}
	for k, r := range ppsRealAddrs() {
		i := realNS(k, e.Lab.Backends)
		if err := lab.WithHandle(e.Lab.BackendNS(i), func(h *netlink.Handle) error {
			link, err := h.LinkByName("eth0")
			if err != nil {
				return err
			}
			return h.AddrReplace(link, &netlink.Addr{IPNet: ipNet32(r, 24)})
		}); err != nil {
			return fmt.Errorf("real %s on %s: %w", r, e.Lab.BackendNS(i), err)
		}
		if err := lab.WithHandle(e.Lab.BalancerNS(), func(h *netlink.Handle) error {
			link, err := h.LinkByName("eth1")
			if err != nil {
				return err
			}
			return h.NeighSet(&netlink.Neigh{LinkIndex: link.Attrs().Index, State: netlink.NUD_PERMANENT,
				IP: r.AsSlice(), HardwareAddr: macs[i]})
		}); err != nil {
			return fmt.Errorf("neighbour %s in %s: %w", r, e.Lab.BalancerNS(), err)
		}
	}
	return nil
}

func ipNet32(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, 32)}
}

// sendPPS runs trafgen in the client namespace for d (SIGINT at the deadline, SIGKILL if it
// lingers), to the VIP or, for direct, to the reals in turn, and counts what left the client
// and what reached the backends. trafgen gives up when a flush of its TX ring finds the socket's
// send buffer full (EAGAIN: the packets it sent are still queued on the way, on a veth whose peer
// runs XDP or behind a deferred softirq); it is then started again for the rest of the window,
// at most maxGeneratorRestarts times, and the sample says how often. The gap counts in Seconds,
// so a restart can only lower the rate reported.
func (e *Env) sendPPS(ctx context.Context, w ppsWorkload, direct bool, d time.Duration) (PPSSample, error) {
	conf, err := e.trafgenConfig(w, direct)
	if err != nil {
		return PPSSample{}, err
	}
	path := filepath.Join(e.Dir(), "pps", w.name+map[bool]string{true: "-direct", false: "-vip"}[direct]+".cfg")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return PPSSample{}, err
	}
	sent0, arrived0, err := e.ppsCounters()
	if err != nil {
		return PPSSample{}, err
	}
	cpu0 := kernelTicks(ppsCPU)
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	restarts := 0
	for {
		ended, out, err := e.runTrafgen(wctx, path)
		if ctx.Err() != nil {
			return PPSSample{}, ctx.Err()
		}
		if !ended {
			break
		}
		if !generatorBackedOff(out) || restarts == maxGeneratorRestarts {
			return PPSSample{}, fmt.Errorf("trafgen (after %d restarts): %w: %s", restarts, err, strings.TrimSpace(string(out)))
		}
		restarts++
	}
	seconds := time.Since(start).Seconds()
	cores := float64(kernelTicks(ppsCPU)-cpu0) / clockTicks / seconds
	sent1, arrived1, err := e.ppsCounters()
	if err != nil {
		return PPSSample{}, err
	}
	return PPSSample{Seconds: seconds, Sent: sent1 - sent0, Arrived: arrived1 - arrived0, KernelCores: cores, GeneratorRestarts: restarts}, nil
}

// maxGeneratorRestarts bounds the restarts of trafgen in one sample: more means the generator,
// not the candidate, is what is measured.
const maxGeneratorRestarts = 20

// runTrafgen sends the packets of config path until ctx ends; ended says trafgen stopped before.
func (e *Env) runTrafgen(ctx context.Context, path string) (ended bool, out []byte, err error) {
	cmd := e.Lab.Exec(ctx, e.Lab.ClientNS(), "taskset", "-c", strconv.Itoa(ppsCPU), "trafgen", "--dev", "eth0", "--conf", path, "--cpus", "1", "--no-sock-mem")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) }
	cmd.WaitDelay = 5 * time.Second
	out, err = cmd.CombinedOutput()
	return ctx.Err() == nil, out, err
}

// generatorBackedOff says trafgen stopped because its socket's send buffer was full (it treats
// EAGAIN from a TX ring flush as fatal; the buffer is global wmem_default, which a lab must not
// raise).
func generatorBackedOff(out []byte) bool {
	return bytes.Contains(out, []byte("Flushing TX_RING failed: Resource temporarily unavailable"))
}

// trafgenConfig is the packet of workload w in trafgen's syntax: 60 bytes, to the balancer's
// MAC, to the VIP or (direct) to each real in turn; trafgen fills in the checksums.
func (e *Env) trafgenConfig(w ppsWorkload, direct bool) (string, error) {
	lbMAC, err := macOf(e, e.Lab.BalancerNS(), "eth0")
	if err != nil {
		return "", err
	}
	clientMAC, err := macOf(e, e.Lab.ClientNS(), "eth0")
	if err != nil {
		return "", err
	}
	dst := "da=" + lab.VIP4
	if direct {
		reals := ppsRealAddrs()
		dst = fmt.Sprintf("da=%s, da[3]=dinc(%d, %d)", reals[0], reals[0].As4()[3], reals[len(reals)-1].As4()[3])
	}
	l4 := 8 // UDP header
	if strings.HasPrefix(w.l4, "tcp") {
		l4 = 20
	}
	return fmt.Sprintf("{\n  eth(da=%s, sa=%s, type=0x0800),\n  ipv4(%s, %s, ttl=64),\n  %s,\n  fill(0x00, %d)\n}\n",
		lbMAC, clientMAC, w.srcs, dst, w.l4, ppsFrameLen-14-20-l4), nil
}

// ppsCounters reads what the client's eth0 sent (transmitted, and dropped on the way into the
// balancer's backlog) and what the backends' eth0 received, summed.
func (e *Env) ppsCounters() (sent, arrived int64, err error) {
	stats := func(ns string) (*netlink.LinkStatistics, error) {
		var st *netlink.LinkStatistics
		err := lab.WithHandle(ns, func(h *netlink.Handle) error {
			link, err := h.LinkByName("eth0")
			if err == nil {
				st = link.Attrs().Statistics
			}
			return err
		})
		if err == nil && st == nil {
			err = fmt.Errorf("no statistics for eth0 in %s", ns)
		}
		return st, err
	}
	st, err := stats(e.Lab.ClientNS())
	if err != nil {
		return 0, 0, err
	}
	sent = int64(st.TxPackets + st.TxDropped)
	for i := 1; i <= e.Lab.Backends; i++ {
		st, err := stats(e.Lab.BackendNS(i))
		if err != nil {
			return 0, 0, err
		}
		arrived += int64(st.RxPackets)
	}
	return sent, arrived, nil
}

// ppsCPU is the CPU the generator, and so the path it drives, runs on.
const ppsCPU = 0

// kernelTicks is the time in system, irq and softirq so far of CPU cpu (/proc/stat, in
// clockTicks). Besides the balancer's forwarding it holds the generator's sends, the switch's
// bridging and the backends' ingress, the same for every candidate.
func kernelTicks(cpu int) int64 {
	c, err := hostCPU(cpu)
	if err != nil {
		return 0
	}
	return ticks(c.System, c.IRQ, c.SoftIRQ)
}

// summarizePPS turns the samples into cells: medians, and ratios to direct of the same workload.
func summarizePPS(backends int, o PPSOptions, workloads []ppsWorkload, candidates []ppsCandidate, missing []string, samples map[[2]string][]PPSSample) *PPSResults {
	res := &PPSResults{Duration: o.Duration.String(), Rounds: o.Rounds, Reals: ppsReals, BackendNamespaces: backends,
		FrameBytes: ppsFrameLen, Generator: "trafgen (netsniff-ng), one thread on CPU 0, in the client namespace",
		CPU: ppsCPU, Switch: o.Switch.orStack(), Missing: missing, Against: o.Against}
	if o.Steer {
		res.Generator = "sluice-lab pps-sender (AF_PACKET, sendmmsg of 64), one thread on CPU 0, in the client namespace"
		res.CPU, res.Steered = steerBalancerCPU, true
	}
	for _, w := range workloads {
		res.Workloads = append(res.Workloads, w.name)
	}
	for _, c := range candidates {
		res.Candidates = append(res.Candidates, c.Name())
	}
	for _, w := range res.Workloads {
		first := len(res.Cells)
		for _, name := range res.Candidates {
			ss := samples[[2]string{name, w}]
			cell := PPSCell{Candidate: name, Workload: w, Rounds: ss,
				SentPPS:      Median(pluck(ss, PPSSample.sentPPS)),
				ForwardedPPS: Median(pluck(ss, PPSSample.forwardedPPS)),
				DropShare:    Median(pluck(ss, PPSSample.dropShare)),
				KernelCores:  Median(pluck(ss, func(s PPSSample) float64 { return s.KernelCores })),
			}
			cell.PPSPerCore = ratio(cell.ForwardedPPS, cell.KernelCores)
			res.Cells = append(res.Cells, cell)
		}
		cells := res.Cells[first:]
		base := cells[slices.IndexFunc(cells, func(c PPSCell) bool { return c.Candidate == (ppsDirect{}).Name() })]
		against := slices.IndexFunc(cells, func(c PPSCell) bool { return c.Candidate == o.Against })
		for i := range cells {
			if against >= 0 && i != against {
				cells[i].Paired = pairedRatio(o.Against, pluck(cells[i].Rounds, PPSSample.perCore), pluck(cells[against].Rounds, PPSSample.perCore))
			}
			cells[i].Ratio = ratio(cells[i].ForwardedPPS, base.ForwardedPPS)
			cells[i].RatioPerCore = ratio(cells[i].PPSPerCore, base.PPSPerCore)
			if cells[i].PPSPerCore > 0 && base.PPSPerCore > 0 {
				cells[i].AddedNS = 1e9/cells[i].PPSPerCore - 1e9/base.PPSPerCore
			}
		}
	}
	return res
}

// Table renders the cells per workload, with the method below.
func (r *PPSResults) Table() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tcandidate\tsent Mpps\tforwarded Mpps\tdropped\tvs direct\tkernel cores\tMpps/core\tper core vs direct\tadded ns/packet\t")
	for _, c := range r.Cells {
		fmt.Fprintf(tw, "%s\t%s\t%.3f\t%.3f\t%.1f%%\t%.1f%%\t%.2f\t%.3f\t%.1f%%\t%.0f\t\n", c.Workload, c.Candidate,
			c.SentPPS/1e6, c.ForwardedPPS/1e6, 100*c.DropShare, 100*c.Ratio, c.KernelCores, c.PPSPerCore/1e6, 100*c.RatioPerCore, c.AddedNS)
	}
	_ = tw.Flush()
	fmt.Fprintf(&b, "\n%d interleaved round(s), %s per send; medians over the rounds.\n", r.Rounds, r.Duration)
	fmt.Fprintf(&b, "load: %s, %d-byte frames to one VIP with %d reals on %d backend namespaces (direct: to the reals in turn)\n",
		r.Generator, r.FrameBytes, r.Reals, r.BackendNamespaces)
	for _, w := range ppsWorkloads {
		if slices.Contains(r.Workloads, w.name) {
			fmt.Fprintf(&b, "  %s: %s\n", w.name, w.what)
		}
	}
	fmt.Fprintf(&b, "forwarded: packets the backends' veths received (they drop them at ingress); dropped: the share of sent that never arrived\n")
	fmt.Fprintf(&b, "switch: %s (stack: the lab's switch bridges in its stack; xdp: its ports forward by MAC at XDP, the backends drop at XDP)\n", r.Switch)
	if r.Steered {
		fmt.Fprintf(&b, "kernel cores: busy time of CPU %d (wall less idle, from the nohz idle clock, less user time), where the NAPI thread\n", r.CPU)
		fmt.Fprintf(&b, "  of the balancer's receive runs alone; the generator, the switch and the backends run on CPU %d\n", steerGeneratorCPU)
	} else {
		fmt.Fprintf(&b, "kernel cores: system+irq+softirq time of CPU %d, where the generator sends and each veth hands the frame on, so the\n", r.CPU)
		fmt.Fprintf(&b, "  balancer, the switch and the backends' ingress forward it within the send (the same overhead for every candidate)\n")
	}
	fmt.Fprintf(&b, "added ns/packet: CPU time per packet (1 / Mpps per core) over direct's, what the balancer adds to plain routing\n")
	for _, c := range r.Cells {
		if n := c.generatorRestarts(); n > 0 {
			fmt.Fprintf(&b, "%s, %s: trafgen found its send buffer full and was started again %d time(s) (the gaps count, lowering the rate)\n", c.Workload, c.Candidate, n)
		}
	}
	if len(r.Missing) > 0 {
		fmt.Fprintf(&b, "not installed, not measured: %s\n", strings.Join(r.Missing, ", "))
	}
	rows := make([]pairedRow, len(r.Cells))
	for i, c := range r.Cells {
		rows[i] = pairedRow{c.Workload, c.Candidate, c.Paired}
	}
	writePairedTable(&b, r.Against, "forwarded packets/s per core", rows)
	return b.String()
}
