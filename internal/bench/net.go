package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/sluicelb/sluice/internal/lab"
)

// Fixed parameters of `sluice-lab bench net`.
const (
	netPort        = 5201      // TCP port of the measurement server on b1
	netMsgSize     = 64 << 10  // bytes per write of the bandwidth test (qperf's tcp_bw default)
	netSinkBufSize = 256 << 10 // bytes per read of the sink
	netWarmup      = 200 * time.Millisecond
	netDialTimeout = 5 * time.Second
	netGrace       = 10 * time.Second // how long a measurement may overrun its duration (draining) before it fails
	netVXLANDev    = "vxbench0"
	netVXLANID     = 91
	netVXLANPort   = 4789
)

// The VXLAN overlay's addresses: the client's end and b1's end.
var (
	netOverlayClient = netip.MustParsePrefix("10.91.100.1/24")
	netOverlayServer = netip.MustParsePrefix("10.91.100.2/24")
)

// Modes a client announces in the first byte of a connection to the measurement server.
const (
	netModeSink byte = 'b' // read and discard until end of stream, then report the byte count
	netModeEcho byte = 'l' // send back every byte
)

// NetOptions bounds `sluice-lab bench net`.
type NetOptions struct {
	// Duration is the length of each bandwidth and of each latency measurement.
	Duration time.Duration
	// Rounds is the number of interleaved rounds; results are their medians.
	Rounds int
	// KeepLab leaves the lab up afterwards (the overlay and the balancer's rules are removed).
	KeepLab bool
}

// NetResults is the outcome of `sluice-lab bench net`: one entry per path, the baseline first.
type NetResults struct {
	DurationSeconds float64   `json:"duration_s"`
	Rounds          int       `json:"rounds"`
	MessageBytes    int       `json:"message_bytes"`
	Baseline        string    `json:"baseline"`
	Paths           []NetPath `json:"paths"`
}

// NetPath is one path's medians over the rounds, their ratios to the baseline's, the spread of
// the per-round ratios and its samples.
type NetPath struct {
	Name          string  `json:"name"`
	Description   string  `json:"description"`
	Target        string  `json:"target"`
	BandwidthGbps float64 `json:"bandwidth_gbps"`
	// BandwidthRatio is this path's median bandwidth / the baseline's.
	BandwidthRatio float64 `json:"bandwidth_ratio"`
	// BandwidthRoundRatios spans this path's bandwidth / the baseline's in the same round.
	BandwidthRoundRatios NetRange `json:"bandwidth_round_ratios"`
	// LatencyUs is one-way latency, the mean round trip / 2 (like qperf's tcp_lat).
	LatencyUs float64 `json:"latency_us"`
	P99RTTUs  float64 `json:"p99_rtt_us"`
	// LatencyRatio is this path's median latency / the baseline's.
	LatencyRatio float64 `json:"latency_ratio"`
	// LatencyRoundRatios spans this path's latency / the baseline's in the same round.
	LatencyRoundRatios NetRange    `json:"latency_round_ratios"`
	Samples            []NetSample `json:"samples"`
}

// NetRange is the smallest and the largest of some values.
type NetRange struct {
	Min float64 `json:"min"`
	Max float64 `json:"max"`
}

// netRangeOf spans vs; the zero NetRange when vs is empty.
func netRangeOf(vs []float64) NetRange {
	if len(vs) == 0 {
		return NetRange{}
	}
	return NetRange{Min: slices.Min(vs), Max: slices.Max(vs)}
}

// String shows the range as MIN-MAX with two decimals.
func (r NetRange) String() string { return fmt.Sprintf("%.2f-%.2f", r.Min, r.Max) }

// NetSample is one round's measurement of one path.
type NetSample struct {
	Round         int     `json:"round"`
	Bytes         int64   `json:"bytes"`
	Seconds       float64 `json:"seconds"`
	BandwidthGbps float64 `json:"bandwidth_gbps"`
	RoundTrips    int     `json:"round_trips"`
	LatencyUs     float64 `json:"latency_us"`
	P99RTTUs      float64 `json:"p99_rtt_us"`
}

// netPath is a way from the client to the server on b1, with what must hold while it is measured.
type netPath struct {
	name, desc string
	target     netip.AddrPort
	// enter and leave run around each measurement; nil for none.
	enter, leave func(context.Context) error
}

// Check reports the first option out of range, naming its flag.
func (o NetOptions) Check() error {
	return firstError(checkDuration("duration", o.Duration, 0), checkCount("rounds", o.Rounds, 1))
}

// RunNet measures TCP bandwidth and latency from the lab's client to backend b1 over each path
// (direct, through Sluice, over VXLAN): in each of Rounds rounds every path once, in an order
// balanced over the rounds, bandwidth then latency for Duration each. It brings the lab up and, unless
// KeepLab, down again, also when it fails or ctx ends. opt must pass Check.
func RunNet(ctx context.Context, e *Env, opt NetOptions) (res *NetResults, err error) {
	err = e.InLab(ctx, opt.KeepLab, func() (err error) {
		res, err = e.runNet(ctx, opt)
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// runNet is RunNet in the lab: the server on b1, the overlay, a warm-up, then the rounds.
func (e *Env) runNet(ctx context.Context, opt NetOptions) (res *NetResults, err error) {
	if err := e.ResetBalancer(ctx); err != nil {
		return nil, fmt.Errorf("resetting the balancer: %w", err)
	}
	srv, err := netListen(e.Lab, e.Lab.BackendNS(1), netPort)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, srv.Close()) }()
	defer cleanup(ctx, &err, "removing the vxlan overlay", e.netOverlayDown)
	if err := e.netOverlayUp(); err != nil {
		return nil, err
	}

	paths := e.netPaths()
	for _, p := range paths {
		if _, err := e.netSample(ctx, p, "warm-up", min(netWarmup, opt.Duration)); err != nil {
			return nil, err
		}
	}
	samples := make(map[string][]NetSample)
	err = interleave(opt.Rounds, len(paths), func(r, i int) error {
		s, err := e.netSample(ctx, paths[i], roundLabel(r, opt.Rounds), opt.Duration)
		if err != nil {
			return err
		}
		s.Round = r + 1
		samples[paths[i].name] = append(samples[paths[i].name], s)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &NetResults{
		DurationSeconds: opt.Duration.Seconds(), Rounds: opt.Rounds, MessageBytes: netMsgSize,
		Baseline: paths[0].name, Paths: netSummarize(paths, samples),
	}, nil
}

// netPaths lists the measured paths, the baseline (direct) first.
func (e *Env) netPaths() []netPath {
	b1 := e.Lab.BackendAddr(1, false)
	return []netPath{
		{
			name:   "direct",
			desc:   "client to b1, routed through the balancer namespace, no balancer rules",
			target: netip.AddrPortFrom(b1, netPort),
		},
		{
			name:   "balancer",
			desc:   "client to the VIP, Sluice nft nat mode with b1 as the only backend",
			target: netip.AddrPortFrom(netip.MustParseAddr(lab.VIP4), netPort),
			enter:  func(ctx context.Context) error { return e.ApplyConfig(ctx, "bench-net", netConfig(b1)) },
			leave:  e.ResetBalancer,
		},
		{
			name:   "vxlan",
			desc:   "client to b1 over a VXLAN overlay (UDP 4789) routed through the balancer namespace",
			target: netip.AddrPortFrom(netOverlayServer.Addr(), netPort),
		},
	}
}

// netConfig is the Sluice config of the balancer path: the server's port on the VIP, nat mode,
// backend as the only backend.
func netConfig(backend netip.Addr) string {
	return fmt.Sprintf(`# sluice-lab bench net: the balancer path.
datapath: nft
services:
  - name: bench-net
    vip: %s
    port: %d
    protocol: tcp
    mode: nat
    backends:
      - address: %s
`, lab.VIP4, netPort, backend)
}

// netSample measures path p once, bandwidth then latency for d each, on fresh connections,
// reporting progress under label.
func (e *Env) netSample(ctx context.Context, p netPath, label string, d time.Duration) (s NetSample, err error) {
	defer func() {
		if cause := context.Cause(ctx); err != nil && cause != nil {
			err = cause // an interrupt, not a failure of the path
		} else if err != nil {
			err = fmt.Errorf("path %s (%s): %w", p.name, p.target, err)
		}
	}()
	if p.enter != nil {
		defer cleanup(ctx, &err, "cleaning up", p.leave) // also after a partial enter
		if err := p.enter(ctx); err != nil {
			return s, err
		}
	}
	e.Progress.Step("%s: %s bandwidth (%v)", label, p.name, d)
	n, elapsed, err := e.netBandwidth(ctx, p.target, d)
	if err != nil {
		return s, err
	}
	e.Progress.Step("%s: %s latency (%v)", label, p.name, d)
	rtts, err := e.netLatency(ctx, p.target, d)
	if err != nil {
		return s, err
	}
	return netSampleOf(n, elapsed, rtts), nil
}

// netSampleOf computes a sample's figures from the bytes the sink received in elapsed and the
// round trips of the latency test.
func netSampleOf(n int64, elapsed time.Duration, rtts []time.Duration) NetSample {
	s := NetSample{Bytes: n, Seconds: elapsed.Seconds(), RoundTrips: len(rtts)}
	if elapsed > 0 {
		s.BandwidthGbps = float64(n) * 8 / elapsed.Seconds() / 1e9
	}
	if len(rtts) == 0 {
		return s
	}
	var sum time.Duration
	for _, d := range rtts {
		sum += d
	}
	s.LatencyUs = float64(sum.Nanoseconds()) / 1e3 / float64(len(rtts)) / 2
	sorted := slices.Sorted(slices.Values(rtts))
	s.P99RTTUs = float64(sorted[(len(sorted)*99+99)/100-1].Nanoseconds()) / 1e3
	return s
}

// netSummarize turns the samples of each path (indexed by round alike for every path) into
// medians, their ratios to the baseline paths[0]'s and the spread of the per-round ratios.
func netSummarize(paths []netPath, samples map[string][]NetSample) []NetPath {
	base := samples[paths[0].name]
	baseBW := Median(pluck(base, func(s NetSample) float64 { return s.BandwidthGbps }))
	baseLat := Median(pluck(base, func(s NetSample) float64 { return s.LatencyUs }))
	var out []NetPath
	for _, p := range paths {
		ss := samples[p.name]
		var bw, lat, p99, bwRatio, latRatio []float64
		for i, s := range ss {
			bw, lat, p99 = append(bw, s.BandwidthGbps), append(lat, s.LatencyUs), append(p99, s.P99RTTUs)
			if i < len(base) {
				bwRatio = append(bwRatio, ratio(s.BandwidthGbps, base[i].BandwidthGbps))
				latRatio = append(latRatio, ratio(s.LatencyUs, base[i].LatencyUs))
			}
		}
		out = append(out, NetPath{
			Name: p.name, Description: p.desc, Target: p.target.String(),
			BandwidthGbps: Median(bw), BandwidthRatio: ratio(Median(bw), baseBW), BandwidthRoundRatios: netRangeOf(bwRatio),
			LatencyUs: Median(lat), P99RTTUs: Median(p99), LatencyRatio: ratio(Median(lat), baseLat), LatencyRoundRatios: netRangeOf(latRatio),
			Samples: ss,
		})
	}
	return out
}

// Table renders the results for a terminal: one line per path, then how to read them.
func (r *NetResults) Table() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "path\tbandwidth Gbit/s\tratio\tper round\tlatency µs\tp99 RTT µs\tratio\tper round")
	for _, p := range r.Paths {
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%s\t%.1f\t%.1f\t%.2f\t%s\n", p.Name, p.BandwidthGbps, p.BandwidthRatio, p.BandwidthRoundRatios,
			p.LatencyUs, p.P99RTTUs, p.LatencyRatio, p.LatencyRoundRatios)
	}
	tw.Flush()
	fmt.Fprintf(&b, "\n%d interleaved round(s), %gs per measurement. bandwidth, latency, p99 RTT: medians over the rounds;\n", r.Rounds, r.DurationSeconds)
	fmt.Fprintf(&b, "ratio: the path's median / %s's median; per round: the lowest-highest of path / %s within one round\n",
		r.Baseline, r.Baseline)
	fmt.Fprintf(&b, "bandwidth: one TCP stream of %d KiB writes; latency: one-way, mean of 1-byte round trips / 2 (like qperf tcp_lat)\n",
		r.MessageBytes>>10)
	for _, p := range r.Paths {
		fmt.Fprintf(&b, "  %-9s %s (%s)\n", p.Name+":", p.Description, p.Target)
	}
	return b.String()
}

// netConn is a client connection that also closes when its context ends.
type netConn struct {
	*net.TCPConn
	stop func() bool
}

// Close closes the connection and releases its context watch.
func (c netConn) Close() error {
	c.stop()
	return c.TCPConn.Close()
}

// netDial connects from the client namespace to target, announces mode and bounds the
// connection's life by d plus netGrace and by ctx.
func (e *Env) netDial(ctx context.Context, target netip.AddrPort, mode byte, d time.Duration) (netConn, error) {
	var c net.Conn
	err := e.Lab.Do(e.Lab.ClientNS(), func() (err error) {
		dialer := net.Dialer{Timeout: netDialTimeout}
		c, err = dialer.DialContext(ctx, "tcp4", target.String())
		return err
	})
	if err != nil {
		return netConn{}, fmt.Errorf("dial from %s: %w", e.Lab.ClientNS(), err)
	}
	tc := c.(*net.TCPConn)
	conn := netConn{TCPConn: tc, stop: context.AfterFunc(ctx, func() { tc.Close() })}
	if err := conn.SetDeadline(time.Now().Add(d + netGrace)); err != nil {
		conn.Close()
		return netConn{}, err
	}
	if _, err := conn.Write([]byte{mode}); err != nil {
		conn.Close()
		return netConn{}, fmt.Errorf("announcing mode %q: %w", mode, err)
	}
	return conn, nil
}

// netBandwidth measures the bandwidth to the sink at target for d (see netStream).
func (e *Env) netBandwidth(ctx context.Context, target netip.AddrPort, d time.Duration) (int64, time.Duration, error) {
	conn, err := e.netDial(ctx, target, netModeSink, d)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	return netStream(conn.TCPConn, d)
}

// netLatency measures the round trips to the echo server at target for d (see netPingPong).
func (e *Env) netLatency(ctx context.Context, target netip.AddrPort, d time.Duration) ([]time.Duration, error) {
	conn, err := e.netDial(ctx, target, netModeEcho, d)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return netPingPong(conn, d)
}

// netStream writes netMsgSize messages to a sink connection for d, then ends the stream; it
// returns the bytes the sink received and the time from the first write until the sink
// reported them.
func netStream(conn *net.TCPConn, d time.Duration) (int64, time.Duration, error) {
	msg := make([]byte, netMsgSize)
	start := time.Now()
	for end := start.Add(d); time.Now().Before(end); {
		if _, err := conn.Write(msg); err != nil {
			return 0, 0, fmt.Errorf("bandwidth: write: %w", err)
		}
	}
	if err := conn.CloseWrite(); err != nil {
		return 0, 0, fmt.Errorf("bandwidth: closing the stream: %w", err)
	}
	var count [8]byte
	if _, err := io.ReadFull(conn, count[:]); err != nil {
		return 0, 0, fmt.Errorf("bandwidth: reading the sink's byte count: %w", err)
	}
	return int64(binary.BigEndian.Uint64(count[:])), time.Since(start), nil
}

// netPingPong sends one byte over an echo connection and waits for it back, again and again
// for d; it returns every round trip.
func netPingPong(conn io.ReadWriter, d time.Duration) ([]time.Duration, error) {
	b := []byte{0}
	var rtts []time.Duration
	for end := time.Now().Add(d); time.Now().Before(end); {
		t0 := time.Now()
		if _, err := conn.Write(b); err != nil {
			return nil, fmt.Errorf("latency: write: %w", err)
		}
		if _, err := io.ReadFull(conn, b); err != nil {
			return nil, fmt.Errorf("latency: read: %w", err)
		}
		rtts = append(rtts, time.Since(t0))
	}
	return rtts, nil
}

// netServer is the measurement server: a sink for bandwidth or an echo for latency, chosen by
// the first byte of each connection.
type netServer struct {
	ln     *net.TCPListener
	wg     sync.WaitGroup
	mu     sync.Mutex
	closed bool
	conns  map[*net.TCPConn]struct{}
}

// netListen starts a measurement server on port in namespace ns of l.
func netListen(l *lab.Lab, ns string, port int) (*netServer, error) {
	var ln *net.TCPListener
	err := l.Do(ns, func() (err error) {
		ln, err = net.ListenTCP("tcp4", &net.TCPAddr{Port: port})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("measurement server on port %d in %s: %w", port, ns, err)
	}
	return netServe(ln), nil
}

// netServe runs a measurement server on ln until Close.
func netServe(ln *net.TCPListener) *netServer {
	s := &netServer{ln: ln, conns: make(map[*net.TCPConn]struct{})}
	s.wg.Go(s.accept)
	return s
}

// accept serves each connection on its own goroutine until the listener closes.
func (s *netServer) accept() {
	for {
		c, err := s.ln.AcceptTCP()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Go(func() {
			defer s.forget(c)
			netHandle(c)
		})
	}
}

// forget closes c and drops it from the open connections.
func (s *netServer) forget(c *net.TCPConn) {
	c.Close()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// Close stops accepting, closes the open connections and waits for their handlers.
func (s *netServer) Close() error {
	err := s.ln.Close()
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

// netHandle reads a connection's mode byte and serves it; failures show at the client.
func netHandle(c *net.TCPConn) {
	var mode [1]byte
	if _, err := io.ReadFull(c, mode[:]); err != nil {
		return
	}
	switch mode[0] {
	case netModeSink:
		netSink(c)
	case netModeEcho:
		netEcho(c)
	}
}

// netSink discards what it reads until the end of the stream, then sends the byte count
// (8 bytes, big endian).
func netSink(c *net.TCPConn) {
	buf := make([]byte, netSinkBufSize)
	var n uint64
	for {
		k, err := c.Read(buf)
		n += uint64(k)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return
		}
	}
	_, _ = c.Write(binary.BigEndian.AppendUint64(nil, n))
}

// netEcho sends back whatever it reads until the end of the stream.
func netEcho(c *net.TCPConn) {
	buf := make([]byte, 64)
	for {
		k, err := c.Read(buf)
		if err != nil {
			return
		}
		if _, err := c.Write(buf[:k]); err != nil {
			return
		}
	}
}

// netOverlayEnd is one end of the VXLAN overlay.
type netOverlayEnd struct {
	ns            string
	local, remote netip.Addr // underlay addresses on eth0
	overlay       netip.Prefix
}

// netOverlayEnds are the overlay's two ends: the client and b1.
func (e *Env) netOverlayEnds() []netOverlayEnd {
	c, b := e.Lab.ClientAddr(false), e.Lab.BackendAddr(1, false)
	return []netOverlayEnd{
		{ns: e.Lab.ClientNS(), local: c, remote: b, overlay: netOverlayClient},
		{ns: e.Lab.BackendNS(1), local: b, remote: c, overlay: netOverlayServer},
	}
}

// netOverlayUp creates the VXLAN overlay between the client and b1, replacing a stale one.
func (e *Env) netOverlayUp() error {
	for _, end := range e.netOverlayEnds() {
		err := lab.WithHandle(end.ns, func(h *netlink.Handle) error {
			if err := netLinkDel(h, netVXLANDev); err != nil {
				return err
			}
			eth0, err := h.LinkByName("eth0")
			if err != nil {
				return err
			}
			attrs := netlink.NewLinkAttrs()
			attrs.Name = netVXLANDev
			vx := &netlink.Vxlan{
				LinkAttrs: attrs, VxlanId: netVXLANID, VtepDevIndex: eth0.Attrs().Index,
				SrcAddr: end.local.AsSlice(), Group: end.remote.AsSlice(), Port: netVXLANPort,
			}
			if err := h.LinkAdd(vx); err != nil {
				return err
			}
			p := end.overlay
			addr := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}}
			if err := h.AddrAdd(vx, addr); err != nil {
				return err
			}
			return h.LinkSetUp(vx)
		})
		if err != nil {
			return fmt.Errorf("vxlan %s in %s (%s to %s): %w", netVXLANDev, end.ns, end.local, end.remote, err)
		}
	}
	return nil
}

// netOverlayDown removes the VXLAN overlay's devices; missing ones are fine.
func (e *Env) netOverlayDown(context.Context) error {
	var errs []error
	for _, end := range e.netOverlayEnds() {
		err := lab.WithHandle(end.ns, func(h *netlink.Handle) error { return netLinkDel(h, netVXLANDev) })
		if err != nil {
			errs = append(errs, fmt.Errorf("deleting %s in %s: %w", netVXLANDev, end.ns, err))
		}
	}
	return errors.Join(errs...)
}

// netLinkDel deletes the link named name if it exists.
func netLinkDel(h *netlink.Handle, name string) error {
	link, err := h.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return h.LinkDel(link)
}
