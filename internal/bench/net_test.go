package bench

import (
	"math"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/config"
)

func TestNetSampleOf(t *testing.T) {
	rtts := make([]time.Duration, 100)
	for i := range rtts {
		rtts[i] = time.Duration(i+1) * time.Microsecond // 1..100 µs, mean 50.5 µs
	}
	s := netSampleOf(1_000_000_000, 2*time.Second, rtts)
	if !near(s.BandwidthGbps, 4) {
		t.Errorf("bandwidth %v Gbit/s, want 4 (1 GB in 2 s)", s.BandwidthGbps)
	}
	if !near(s.LatencyUs, 25.25) {
		t.Errorf("one-way latency %v µs, want 25.25 (mean RTT 50.5 / 2)", s.LatencyUs)
	}
	if !near(s.P99RTTUs, 99) {
		t.Errorf("p99 RTT %v µs, want 99 (nearest rank of 1..100)", s.P99RTTUs)
	}
	if s.RoundTrips != 100 || s.Bytes != 1_000_000_000 || !near(s.Seconds, 2) {
		t.Errorf("sample %+v does not keep its raw figures", s)
	}
	if one := netSampleOf(0, 0, []time.Duration{7 * time.Microsecond}); !near(one.P99RTTUs, 7) || one.BandwidthGbps != 0 {
		t.Errorf("one round trip, no time: %+v, want p99 7 µs and bandwidth 0", one)
	}
}

func TestNetSummarize(t *testing.T) {
	paths := []netPath{{name: "direct"}, {name: "other"}}
	sample := func(bw, lat float64) NetSample {
		return NetSample{BandwidthGbps: bw, LatencyUs: lat, P99RTTUs: 2 * lat}
	}
	// The median of the per-round ratios (bandwidth 0.83, latency 1.25) differs from the ratio of
	// the medians (10/11, 30/20): the table shows the latter, which agrees with its figures.
	samples := map[string][]NetSample{
		"direct": {sample(10, 10), sample(12, 20), sample(11, 40)},
		"other":  {sample(11, 30), sample(10, 20), sample(9, 50)},
	}
	got := netSummarize(paths, samples)
	if len(got) != 2 || got[0].Name != "direct" || got[1].Name != "other" {
		t.Fatalf("summary %+v, want direct then other", got)
	}
	d, o := got[0], got[1]
	if !near(d.BandwidthRatio, 1) || !near(d.LatencyRatio, 1) || d.BandwidthRoundRatios != (NetRange{1, 1}) || d.LatencyRoundRatios != (NetRange{1, 1}) {
		t.Errorf("baseline ratios %+v, want 1 throughout", d)
	}
	if !near(o.BandwidthGbps, 10) || !near(o.LatencyUs, 30) || !near(o.P99RTTUs, 60) {
		t.Errorf("other's medians %v Gbit/s, %v µs, p99 %v µs, want 10, 30, 60", o.BandwidthGbps, o.LatencyUs, o.P99RTTUs)
	}
	if !near(o.BandwidthRatio, 10.0/11) || !near(o.LatencyRatio, 1.5) {
		t.Errorf("other's ratios %v and %v, want 10/11 and 30/20 (of the medians)", o.BandwidthRatio, o.LatencyRatio)
	}
	if r := o.BandwidthRoundRatios; !near(r.Min, 9.0/11) || !near(r.Max, 1.1) {
		t.Errorf("other's bandwidth per round %+v, want 9/11 to 11/10", r)
	}
	if r := o.LatencyRoundRatios; !near(r.Min, 1) || !near(r.Max, 3) {
		t.Errorf("other's latency per round %+v, want 1 to 3", r)
	}
	if len(o.Samples) != 3 {
		t.Errorf("other keeps %d samples, want 3", len(o.Samples))
	}
}

func TestNetTable(t *testing.T) {
	res := &NetResults{DurationSeconds: 5, Rounds: 3, MessageBytes: netMsgSize, Baseline: "direct", Paths: []NetPath{
		{Name: "direct", Description: "d", Target: "10.0.0.1:1", BandwidthGbps: 12.345, BandwidthRatio: 1, BandwidthRoundRatios: NetRange{1, 1},
			LatencyUs: 10.04, P99RTTUs: 30, LatencyRatio: 1, LatencyRoundRatios: NetRange{1, 1}},
		{Name: "vxlan", Description: "v", Target: "10.0.0.2:1", BandwidthGbps: 6.1, BandwidthRatio: 0.494, BandwidthRoundRatios: NetRange{0.45, 0.52},
			LatencyUs: 15, P99RTTUs: 45.55, LatencyRatio: 1.5, LatencyRoundRatios: NetRange{1.2, 1.666}},
	}}
	lines := strings.Split(res.Table(), "\n")
	for i, want := range [][]string{
		{"path", "bandwidth", "Gbit/s", "ratio", "per", "round", "latency", "µs", "p99", "RTT", "µs", "ratio", "per", "round"},
		{"direct", "12.35", "1.00", "1.00-1.00", "10.0", "30.0", "1.00", "1.00-1.00"},
		{"vxlan", "6.10", "0.49", "0.45-0.52", "15.0", "45.5", "1.50", "1.20-1.67"},
	} {
		if got := strings.Fields(lines[i]); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("table line %d: %q, want fields %q", i, lines[i], want)
		}
	}
	if tab := res.Table(); !strings.Contains(tab, "3 interleaved round(s), 5s per measurement") ||
		!strings.Contains(tab, "ratio: the path's median / direct's median; per round: the lowest-highest of path / direct within one round") || !strings.Contains(tab, "vxlan:    v (10.0.0.2:1)") {
		t.Errorf("table lacks its legend:\n%s", tab)
	}
}

func TestNetConfigIsValid(t *testing.T) {
	text := netConfig(netip.MustParseAddr("10.91.2.11"))
	if _, err := config.Parse("bench-net.yaml", []byte(text)); err != nil {
		t.Fatalf("netConfig does not parse: %v\n%s", err, text)
	}
}

// TestNetServer runs the wire protocol (sink and echo) against the server on loopback.
func TestNetServer(t *testing.T) {
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	srv := netServe(ln)
	dial := func(mode byte) *net.TCPConn {
		t.Helper()
		c, err := net.DialTCP("tcp4", nil, ln.Addr().(*net.TCPAddr))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte{mode}); err != nil {
			t.Fatal(err)
		}
		return c
	}

	n, elapsed, err := netStream(dial(netModeSink), 20*time.Millisecond)
	if err != nil {
		t.Fatalf("bandwidth: %v", err)
	}
	if n <= 0 || n%netMsgSize != 0 || elapsed < 20*time.Millisecond {
		t.Errorf("sink counted %d bytes in %v, want a positive multiple of %d in >= 20ms", n, elapsed, netMsgSize)
	}
	rtts, err := netPingPong(dial(netModeEcho), 20*time.Millisecond)
	if err != nil || len(rtts) == 0 {
		t.Errorf("latency: %d round trips, %v; want some and no error", len(rtts), err)
	}

	// Close ends a connection still open and waits for its handler.
	idle := dial(netModeEcho)
	if err := srv.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if _, err := idle.Read(make([]byte, 1)); err == nil {
		t.Error("a connection open at Close still reads")
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9*max(1, math.Abs(b)) }
