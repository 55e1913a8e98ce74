package bench

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/lab"
)

// A candidate is one way of getting the client's requests to the backends.
type candidate interface {
	// Name is how tables, JSON and --candidates call it (direct, nft-nat, haproxy, ...).
	Name() string
	// start configures the balancer namespace; stop undoes it completely.
	start(ctx context.Context, e *Env) error
	stop(ctx context.Context, e *Env) error
	// targets are where the client sends its load, one per wrk thread.
	targets(e *Env) []netip.AddrPort
	// pids are the userspace processes doing the balancing, whose CPU time is the balancer's; none for kernel datapaths.
	pids() []int
}

// vipPort is the port every balancing candidate serves on the lab's IPv4 VIP.
const vipPort = 80

// vipTargets sends every wrk thread to the VIP.
func vipTargets(e *Env) []netip.AddrPort {
	return sameTarget(e, netip.AddrPortFrom(netip.MustParseAddr(lab.VIP4), vipPort))
}

// sameTarget sends every wrk thread (one per backend) to target.
func sameTarget(e *Env, target netip.AddrPort) []netip.AddrPort {
	t := make([]netip.AddrPort, e.Lab.Backends)
	for i := range t {
		t[i] = target
	}
	return t
}

// backendTargets lists the backends' HTTP addresses.
func backendTargets(e *Env) []netip.AddrPort {
	t := make([]netip.AddrPort, e.Lab.Backends)
	for i := range t {
		t[i] = netip.AddrPortFrom(e.Lab.BackendAddr(i+1, false), vipPort)
	}
	return t
}

// direct is the baseline: the client talks to each backend straight, routed through the
// balancer namespace with no balancing, one wrk thread per backend.
type direct struct{}

func (direct) Name() string                      { return "direct" }
func (direct) start(context.Context, *Env) error { return nil }
func (direct) stop(context.Context, *Env) error  { return nil }
func (direct) targets(e *Env) []netip.AddrPort   { return backendTargets(e) }
func (direct) pids() []int                       { return nil }

// ecmp is the second baseline: the client talks to lab.Anycast4, which the balancer namespace
// routes to every backend by one multipath route hashed on the 5-tuple. Like a balancer, and
// unlike direct, it spreads each wrk thread's connections over all the backends; it is plain
// kernel routing with no balancer, so it separates what spreading costs from what a datapath costs.
type ecmp struct{}

func (ecmp) Name() string                      { return "ecmp" }
func (ecmp) start(context.Context, *Env) error { return nil }
func (ecmp) stop(context.Context, *Env) error  { return nil }
func (ecmp) pids() []int                       { return nil }

func (ecmp) targets(e *Env) []netip.AddrPort {
	return sameTarget(e, netip.AddrPortFrom(netip.MustParseAddr(lab.Anycast4), vipPort))
}

// sluiceCandidate is Sluice with one datapath in one forwarding mode, at one attach point
// (empty: the datapath's default), with the nft opt-outs of optOuts.
type sluiceCandidate struct {
	datapath, mode, attach string
	optOuts                nftOptOuts
}

func (s sluiceCandidate) Name() string { return sluiceName(s.datapath, s.mode, s.attach, s.optOuts) }

// nftOptOuts are the nft datapath's guarantees a candidate turns off, to show what they cost.
type nftOptOuts string

const (
	// defaults turns nothing off.
	defaults nftOptOuts = ""
	// uncounted turns nft.packet_counters off.
	uncounted nftOptOuts = "uncounted"
	// lean turns off every opt-out: nft.packet_counters and nft.half_open_timeouts.
	lean nftOptOuts = "lean"
)

// sluiceName names a Sluice candidate: datapath-mode, then -xdp at XDP, then -uncounted or -lean
// for its opt-outs.
func sluiceName(datapath, mode, attach string, optOuts nftOptOuts) string {
	name := datapath + "-" + mode
	if attach == "xdp" {
		name += "-xdp"
	}
	if optOuts != defaults {
		name += "-" + string(optOuts)
	}
	return name
}

// writeSluiceHeader writes what a candidate's config sets before its services.
func writeSluiceHeader(b *strings.Builder, datapath, attach string, optOuts nftOptOuts) {
	fmt.Fprintf(b, "datapath: %s\n", datapath)
	if attach != "" {
		fmt.Fprintf(b, "attach: %s\n", attach)
	}
	switch optOuts {
	case defaults:
	case uncounted:
		b.WriteString("nft:\n  packet_counters: false\n")
	case lean:
		b.WriteString("nft:\n  packet_counters: false\n  half_open_timeouts: false\n")
	}
}

// start makes the backends decapsulate for a tunnel candidate (attachDecap) and puts XDP where
// an XDP candidate's frames land (setCandidateXDP) first, and undoes both when one fails.
func (s sluiceCandidate) start(ctx context.Context, e *Env) error {
	if s.tunnels() {
		if err := attachDecap(e); err != nil {
			return err
		}
	}
	err := s.startBalancer(ctx, e)
	if err != nil && s.tunnels() {
		err = errors.Join(err, detachDecap(e, e.Lab.Backends))
	}
	return err
}

// startBalancer applies the candidate's config, with XDP set up first and taken away again when
// the config fails.
func (s sluiceCandidate) startBalancer(ctx context.Context, e *Env) error {
	if s.attach != "xdp" {
		return e.ApplyConfig(ctx, s.Name(), s.config(e))
	}
	if err := setCandidateXDP(e, true); err != nil {
		return err
	}
	if err := e.ApplyConfig(ctx, s.Name(), s.config(e)); err != nil {
		return errors.Join(err, setCandidateXDP(e, false))
	}
	return nil
}

func (s sluiceCandidate) stop(ctx context.Context, e *Env) error {
	err := e.ResetBalancer(ctx)
	if s.attach == "xdp" {
		err = errors.Join(err, setCandidateXDP(e, false))
	}
	if s.tunnels() {
		err = errors.Join(err, detachDecap(e, e.Lab.Backends))
	}
	return err
}

// tunnels tells whether the candidate is mode tunnel, whose backends must decapsulate.
func (s sluiceCandidate) tunnels() bool { return s.mode == string(config.ModeTunnel) }

func (sluiceCandidate) targets(e *Env) []netip.AddrPort { return vipTargets(e) }
func (sluiceCandidate) pids() []int                     { return nil }

// config is the benchmark's one service: the VIP over every lab backend, Maglev.
func (s sluiceCandidate) config(e *Env) string {
	var b strings.Builder
	writeSluiceHeader(&b, s.datapath, s.attach, s.optOuts)
	fmt.Fprintf(&b, "services:\n  - name: bench\n    vip: %s\n    port: %d\n    protocol: tcp\n    mode: %s\n    backends:\n",
		lab.VIP4, vipPort, s.mode)
	for _, t := range backendTargets(e) {
		fmt.Fprintf(&b, "      - address: %s\n", t.Addr())
	}
	return b.String()
}
