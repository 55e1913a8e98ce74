package bench

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPPSOptionsCheck(t *testing.T) {
	ok := PPSOptions{Duration: 5 * time.Second, Rounds: 3, Workloads: []string{"syn"}, Candidates: []string{"ebpf-dsr-xdp"}}
	if err := ok.Check(); err != nil {
		t.Fatal(err)
	}
	for flag, o := range map[string]PPSOptions{
		"--duration":   {Duration: 500 * time.Millisecond, Rounds: 1},
		"--rounds":     {Duration: time.Second},
		"--workloads":  {Duration: time.Second, Rounds: 1, Workloads: []string{"tcp"}},
		"--candidates": {Duration: time.Second, Rounds: 1, Candidates: []string{"ebpf-fullnat"}},
		"--switch":     {Duration: time.Second, Rounds: 1, Switch: "fast"},
	} {
		if err := o.Check(); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%+v: %v, want an error naming %s", o, err, flag)
		}
	}
}

func TestSelectPPSAlwaysMeasuresDirect(t *testing.T) {
	got, _, err := selectPPS([]string{"nft-dsr"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name() != "direct" || got[1].Name() != "nft-dsr" {
		t.Errorf("got %v, want direct and nft-dsr", got)
	}
}

func TestSelectPPSUncountedOnlyWhenNamed(t *testing.T) {
	all, _, err := selectPPS(nil)
	if err != nil || slices.ContainsFunc(all, func(c ppsCandidate) bool { return c.Name() == "nft-nat-uncounted" }) {
		t.Errorf("all candidates %v (%v): nft-nat-uncounted is measured only when named", all, err)
	}
	got, _, err := selectPPS([]string{"nft-nat-uncounted"})
	if err != nil || len(got) != 2 || got[1].Name() != "nft-nat-uncounted" {
		t.Errorf("got %v (%v), want direct and nft-nat-uncounted", got, err)
	}
}

func TestRealsRoundRobinFromTheBackendsOwnAddresses(t *testing.T) {
	reals := ppsRealAddrs()
	if len(reals) != ppsReals || reals[0].String() != "10.91.2.11" || reals[ppsReals-1].String() != "10.91.2.110" {
		t.Fatalf("reals %v .. %v", reals[0], reals[len(reals)-1])
	}
	for k, want := range map[int]int{0: 1, 1: 2, 2: 3, 3: 1, 99: 1} {
		if got := realNS(k, 3); got != want {
			t.Errorf("real %d on backend %d, want %d", k, got, want)
		}
	}
}

func TestSummarizePPSRatiosToDirect(t *testing.T) {
	o := PPSOptions{Duration: time.Second, Rounds: 2}
	samples := map[[2]string][]PPSSample{
		{"direct", "udp"}:  {{Seconds: 1, Sent: 1000, Arrived: 1000, KernelCores: 2}, {Seconds: 1, Sent: 1400, Arrived: 1400, KernelCores: 2}},
		{"nft-nat", "udp"}: {{Seconds: 1, Sent: 1000, Arrived: 500, KernelCores: 1}, {Seconds: 1, Sent: 1000, Arrived: 700, KernelCores: 1}},
	}
	res := summarizePPS(3, o, ppsWorkloads[:1], []ppsCandidate{ppsDirect{}, ppsSluice{datapath: "nft", mode: "nat"}}, nil, samples)
	c := res.Cells[1]
	if c.ForwardedPPS != 600 || c.DropShare != 0.4 || c.Ratio != 0.5 || c.PPSPerCore != 600 || c.RatioPerCore != 1 || c.AddedNS != 0 {
		t.Errorf("nft-nat cell %+v", c)
	}
	if !strings.Contains(res.Table(), "nft-nat") {
		t.Errorf("table:\n%s", res.Table())
	}
}

// TestSummarizePPSAgainst: with --against, every other cell gets its packets/s per core over the
// named candidate's, round by round, and the table shows them.
func TestSummarizePPSAgainst(t *testing.T) {
	o := PPSOptions{Duration: time.Second, Rounds: 2, Against: "nft-nat"}
	samples := map[[2]string][]PPSSample{
		// per core: direct 500 and 700, nft-nat 1000 and 700
		{"direct", "udp"}:  {{Seconds: 1, Sent: 1000, Arrived: 1000, KernelCores: 2}, {Seconds: 1, Sent: 1400, Arrived: 1400, KernelCores: 2}},
		{"nft-nat", "udp"}: {{Seconds: 1, Sent: 1000, Arrived: 500, KernelCores: 0.5}, {Seconds: 1, Sent: 1000, Arrived: 700, KernelCores: 1}},
	}
	res := summarizePPS(3, o, ppsWorkloads[:1], []ppsCandidate{ppsDirect{}, ppsSluice{datapath: "nft", mode: "nat"}}, nil, samples)
	d, n := res.Cells[0].Paired, res.Cells[1].Paired
	if n != nil || d == nil || d.Against != "nft-nat" || len(d.Rounds) != 2 || math.Abs(d.Rounds[0]-0.5) > 1e-9 || math.Abs(d.Rounds[1]-1) > 1e-9 {
		t.Fatalf("paired: direct %+v, nft-nat %+v; want direct's rounds 50%% and 100%% of nft-nat's per core, nft-nat none", d, n)
	}
	if table := res.Table(); !strings.Contains(table, "per-round ratios to nft-nat (each round's forwarded packets/s per core") || !strings.Contains(table, "50 100") {
		t.Errorf("table:\n%s", table)
	}
}

func TestGeneratorRestartsAreOnlyForAFullSendBuffer(t *testing.T) {
	backedOff := "1 packets to schedule\n60 bytes in total\nRunning! Hang up with ^C!\n\nFlushing TX_RING failed: Resource temporarily unavailable!\n"
	if !generatorBackedOff([]byte(backedOff)) {
		t.Errorf("a full send buffer is not recognised: %q", backedOff)
	}
	for _, other := range []string{"Cannot find device eth0!", "Flushing TX_RING failed: No such device or address!", ""} {
		if generatorBackedOff([]byte(other)) {
			t.Errorf("%q taken for a full send buffer", other)
		}
	}
	o := PPSOptions{Duration: time.Second, Rounds: 2}
	samples := map[[2]string][]PPSSample{
		{"direct", "udp"}:  {{Seconds: 1, Sent: 10, Arrived: 10, KernelCores: 1}, {Seconds: 1, Sent: 10, Arrived: 10, KernelCores: 1}},
		{"nft-nat", "udp"}: {{Seconds: 1, Sent: 10, Arrived: 9, KernelCores: 1, GeneratorRestarts: 2}, {Seconds: 1, Sent: 10, Arrived: 9, KernelCores: 1, GeneratorRestarts: 1}},
	}
	table := summarizePPS(3, o, ppsWorkloads[:1], []ppsCandidate{ppsDirect{}, ppsSluice{datapath: "nft", mode: "nat"}}, nil, samples).Table()
	if !strings.Contains(table, "udp, nft-nat: trafgen found its send buffer full and was started again 3 time(s)") || strings.Contains(table, "direct: trafgen") {
		t.Errorf("restarts not reported per cell:\n%s", table)
	}
}

// TestBusyClockReadsThisMachine: the steered bench's clock reads /proc/stat's CPU 0 and gives a
// share of a core; a CPU that does not exist is an error, not an idle CPU.
func TestBusyClockReadsThisMachine(t *testing.T) {
	c, err := startBusyClock(0)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if cores, err := c.cores(); err != nil || cores < 0 || cores > 1 {
		t.Errorf("CPU 0 busy %v cores, %v", cores, err)
	}
	if _, _, err := cpuIdleUser(1 << 20); err == nil {
		t.Error("CPU 1048576 read without an error")
	}
}

// TestPPSTunnelCandidates: bench pps measures mode tunnel on ebpf at tc and at XDP, and not on
// nft, which cannot encapsulate.
func TestPPSTunnelCandidates(t *testing.T) {
	names := PPSCandidateNames()
	for _, want := range []string{"ebpf-tunnel", "ebpf-tunnel-xdp"} {
		if !slices.Contains(names, want) {
			t.Errorf("no candidate %s among %v", want, names)
		}
	}
	if slices.Contains(names, "nft-tunnel") {
		t.Errorf("nft-tunnel among %v", names)
	}
}
