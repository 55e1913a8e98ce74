package bench

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/lab"
)

func TestParseWrk(t *testing.T) {
	out := "Running 1s test @ http://10.91.9.100/\n  3 threads and 48 connections\n" +
		`SLUICE-WRK {"requests":3000,"duration_us":1500000,"bytes":1,"connect_errors":1,"read_errors":2,"write_errors":0,"status_errors":3,"timeouts":4,"p50_us":150,"p99_us":900,"mean_us":170.5}` + "\n"
	r, err := parseWrk([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if r.RPS() != 2000 || r.Errors() != 10 || r.P50US != 150 || r.P99US != 900 {
		t.Errorf("parsed %+v: rps %v errors %d", r, r.RPS(), r.Errors())
	}
	if _, err := parseWrk([]byte("unable to connect to 10.91.9.100:80 Connection refused\n")); err == nil ||
		!strings.Contains(err.Error(), "Connection refused") {
		t.Errorf("no result line: err %v, want it to quote wrk's output", err)
	}
	if _, err := parseWrk([]byte("SLUICE-WRK {\"requests\": x}\n")); err == nil {
		t.Error("a malformed result line was accepted")
	}
}

func TestWrkScript(t *testing.T) {
	targets := []netip.AddrPort{netip.MustParseAddrPort("10.91.2.11:80"), netip.MustParseAddrPort("10.91.2.12:80")}
	tests := []struct {
		load      wrkLoad
		want, not []string
	}{
		{wrkLoad{Targets: targets}, []string{`{ "10.91.2.11", "80" }, { "10.91.2.12", "80" }`, "function done"},
			[]string{"Connection", "function request", "function delay"}},
		{wrkLoad{Targets: targets, Close: true, DelayMin: 100 * time.Millisecond, DelayMax: 200 * time.Millisecond},
			[]string{`wrk.headers["Connection"] = "close"`, "math.random(100, 200)", "/delay?s="}, []string{"function delay"}},
		{wrkLoad{Targets: targets, Pace: 24 * time.Millisecond}, []string{"function delay()\n\treturn 24\n"}, []string{"function request"}},
	}
	for _, tt := range tests {
		s, err := tt.load.script()
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range tt.want {
			if !strings.Contains(s, w) {
				t.Errorf("script lacks %q:\n%s", w, s)
			}
		}
		for _, n := range tt.not {
			if strings.Contains(s, n) {
				t.Errorf("script has %q:\n%s", n, s)
			}
		}
	}
	argv := wrkLoad{Targets: targets, Threads: 2, Conns: 32, Path: "/64k", Duration: 1500 * time.Millisecond}.argv("/x.lua")
	if got := strings.Join(argv, " "); got != "wrk -t 2 -c 32 -d 2s --timeout 2s -s /x.lua http://10.91.2.11:80/64k" {
		t.Errorf("argv %q", got)
	}
}

func TestPortRangesRotateDisjoint(t *testing.T) {
	var p portRanges
	seen := map[int]bool{}
	prevHigh := 0
	for i := range perConnSlots {
		low, high := p.next(true)
		if low <= prevHigh || high < low || high > perConnHigh || seen[low] {
			t.Fatalf("slot %d: %d-%d overlaps or is out of range", i, low, high)
		}
		seen[low], prevHigh = true, high
	}
	if low, _ := p.next(true); low != perConnLow {
		t.Errorf("after %d slots the rotation starts at %d, want %d", perConnSlots, low, perConnLow)
	}
	if low, high := p.next(false); low != keepAliveLow || high != keepAliveHigh {
		t.Errorf("keep-alive range %d-%d", low, high)
	}
}

func TestMedian(t *testing.T) {
	for _, tt := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := Median(tt.in); got != tt.want {
			t.Errorf("Median(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestSelect(t *testing.T) {
	if _, err := selectWorkloads([]string{"keepalive", "bogus"}); err == nil || !strings.Contains(err.Error(), "--workloads") {
		t.Errorf("unknown workload: %v", err)
	}
	ws, err := selectWorkloads([]string{"latency", "keepalive"})
	if err != nil || len(ws) != 2 || ws[0].Name != "keepalive" {
		t.Errorf("selected %v, %v: want keepalive then latency (run order)", ws, err)
	}
	if _, _, err := selectCandidates([]string{"nft-bogus"}); err == nil || !strings.Contains(err.Error(), "unknown candidate") {
		t.Errorf("unknown candidate: %v", err)
	}
	cs, _, err := selectCandidates([]string{"nft-dsr"})
	if err != nil || len(cs) != 3 || cs[0].Name() != "direct" || cs[1].Name() != "ecmp" || cs[2].Name() != "nft-dsr" {
		t.Errorf("selected %v, %v: want direct and ecmp added as the baselines", cs, err)
	}
	all, _, err := selectCandidates(nil)
	if err != nil || slices.ContainsFunc(all, func(c candidate) bool {
		return strings.HasSuffix(c.Name(), "-uncounted") || strings.HasSuffix(c.Name(), "-lean")
	}) {
		t.Errorf("all candidates %v (%v): the uncounted and lean ones are measured only when named", all, err)
	}
	cs, _, err = selectCandidates([]string{"nft-nat-uncounted", "nft-nat"})
	if err != nil || len(cs) != 4 || cs[2].Name() != "nft-nat" || cs[3].Name() != "nft-nat-uncounted" {
		t.Fatalf("selected %v, %v: want the baselines, nft-nat and nft-nat-uncounted", cs, err)
	}
	if config := cs[3].(sluiceCandidate).config(&Env{Lab: &lab.Lab{Backends: 1}}); !strings.Contains(config, "nft:\n  packet_counters: false\n") {
		t.Errorf("nft-nat-uncounted's config:\n%s", config)
	}
	cs, _, err = selectCandidates([]string{"nft-fullnat-lean"})
	if err != nil || len(cs) != 3 || cs[2].Name() != "nft-fullnat-lean" {
		t.Fatalf("selected %v, %v: want the baselines and nft-fullnat-lean", cs, err)
	}
	text := cs[2].(sluiceCandidate).config(&Env{Lab: &lab.Lab{Backends: 1}})
	if cfg, err := config.Parse("lean", []byte(text)); err != nil || cfg.NFTPacketCounters() || cfg.NFTHalfOpenTimeouts() {
		t.Errorf("nft-fullnat-lean's config (%v) does not turn every opt-out off:\n%s", err, text)
	}
}

func sampleResults() *LBResults {
	cpu := 0.5
	o := LBOptions{Duration: time.Second, Rounds: 3, Rate: 1000}
	ws, _ := selectWorkloads([]string{"keepalive", "latency"})
	cands := []candidate{direct{}, ecmp{}, sluiceCandidate{datapath: "nft", mode: "nat"}, &proxyPeer{name: "haproxy"}}
	samples := map[[2]string][]LBSample{}
	for i, c := range cands {
		for _, w := range ws {
			for r := range 3 {
				s := LBSample{RPS: 1000 / float64(i+1) * float64(r+1), P50US: 100 * float64(i+1), P99US: 1000 * float64(i+1), Errors: int64(i)}
				if c.Name() == "haproxy" {
					s.CPU = &cpu
				}
				samples[[2]string{c.Name(), w.Name}] = append(samples[[2]string{c.Name(), w.Name}], s)
			}
		}
	}
	return summarize(o, 3, ws, cands, []string{"nftlb-dsr"}, samples)
}

func TestSummarize(t *testing.T) {
	r := sampleResults()
	d, _ := r.Cell("direct", "keepalive")
	e, _ := r.Cell("ecmp", "keepalive")
	n, _ := r.Cell("nft-nat", "keepalive")
	h, _ := r.Cell("haproxy", "latency")
	if d.RPS != 2000 || d.Ratio != 1 || e.RPS != 1000 || e.RatioECMP != 1 || n.RPS != 2000.0/3 || n.Errors != 6 {
		t.Errorf("direct %+v, ecmp %+v, nft-nat %+v: want medians 2000, 1000 and 667, 6 errors", d, e, n)
	}
	if n.Ratio != 1.0/3 || n.RatioECMP != 2.0/3 || d.RatioECMP != 2 {
		t.Errorf("nft-nat ratios %v to direct and %v to ecmp, direct %v to ecmp: want 1/3, 2/3 and 2", n.Ratio, n.RatioECMP, d.RatioECMP)
	}
	if d.CPU != nil || h.CPU == nil || *h.CPU != 0.5 || h.P99US != 4000 {
		t.Errorf("cpu: direct %v, haproxy %+v", d.CPU, h)
	}
	table := r.Table()
	for _, want := range []string{"keepalive", "nft-nat", "33.3%", "66.7%", "2,000", "0.50", "VS ECMP", "nftlb-dsr (sluice-lab bench lb --install-peers)"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if _, err := json.Marshal(r); err != nil {
		t.Fatal(err)
	}
}

func TestSVGIsWellFormed(t *testing.T) {
	svg := sampleResults().SVG()
	dec := xml.NewDecoder(strings.NewReader(svg))
	bars := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG: %v\n%s", err, svg)
		}
		if el, ok := tok.(xml.StartElement); ok && el.Name.Local == "rect" {
			bars++
		}
	}
	// background + 4 candidates x 2 workloads + 4 legend swatches
	if bars != 1+8+4 {
		t.Errorf("%d rects in the SVG, want 13", bars)
	}
}

func TestNftlbFarmKeyOrder(t *testing.T) {
	e := NewEnv("x", 2, "/bin/true", "/bin/true", nil)
	data, err := (&nftlbPeer{mode: "dnat"}).farm(e)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	if i, j := strings.Index(s, `"mode": "dnat"`), strings.Index(s, `"backends"`); i < 0 || j < i {
		t.Errorf("nftlb needs the mode before the backends:\n%s", s)
	}
	if !strings.Contains(s, `"ip-addr": "10.91.2.12"`) || !strings.Contains(s, `"sched-param": "srcip srcport"`) {
		t.Errorf("farm:\n%s", s)
	}
}

// TestNoNFTTunnelCandidate: nft cannot encapsulate, so bench lb has no nft-tunnel candidate.
func TestNoNFTTunnelCandidate(t *testing.T) {
	all, _, err := selectCandidates(nil)
	if err != nil || slices.ContainsFunc(all, func(c candidate) bool { return c.Name() == "nft-tunnel" }) {
		t.Errorf("candidates %v (%v): nft-tunnel among them", all, err)
	}
	if _, _, err := selectCandidates([]string{"nft-tunnel"}); err == nil {
		t.Error("nft-tunnel named: no error")
	}
}

// TestStealLine: the report names the run that lost most to the hypervisor, and counts the runs
// that lost a point or more; nothing when steal was not measured.
func TestStealLine(t *testing.T) {
	share := func(v float64) *float64 { return &v }
	r := &LBResults{Cells: []LBCell{
		{Candidate: "nft-nat", Workload: "per-conn", Rounds: []LBSample{{Steal: share(0.001)}, {Steal: share(0.004)}}},
		{Candidate: "nft-dnat", Workload: "per-conn", Rounds: []LBSample{{Steal: share(0)}, {}}},
	}}
	if got, want := r.stealLine(), "hypervisor steal: at most 0.4% of the machine's CPU in any run (nft-nat, per-conn, round 2)\n"; got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	r.Cells[1].Rounds[1].Steal = share(0.031)
	r.Cells[0].Rounds[0].Steal = share(0.01)
	if got := r.stealLine(); !strings.Contains(got, "2 of 4 runs lost 1% or more") || !strings.Contains(got, "at most 3.1% (nft-dnat, per-conn, round 2)") {
		t.Errorf("got %q", got)
	}
	if got := (&LBResults{Cells: []LBCell{{Rounds: []LBSample{{}}}}}).stealLine(); got != "" {
		t.Errorf("unmeasured steal reported: %q", got)
	}
}

func TestSwitchDropsLine(t *testing.T) {
	share := func(v float64) *float64 { return &v }
	r := &LBResults{Switch: SwitchStack, Cells: []LBCell{
		{Candidate: "nft-dsr", Workload: "640k", Rounds: []LBSample{{SwitchDrops: share(0)}, {}}},
		{Candidate: "direct", Workload: "640k", Rounds: []LBSample{{SwitchDrops: share(0)}}},
	}}
	if got, want := r.switchDropsLine(), "switch: no frame dropped at its ports in any run\n"; got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	r.Cells[1].Rounds[0].SwitchDrops = share(0.00002)
	if got, want := r.switchDropsLine(), "switch: at most 0.002% of the frames dropped at its ports in any run (direct, 640k, round 1)\n"; got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	r.Cells[0].Rounds[1].SwitchDrops = share(0.105)
	got := r.switchDropsLine()
	if !strings.Contains(got, "1 of 3 runs lost 0.1% or more of their frames") || !strings.Contains(got, "at most 10.5% (nft-dsr, 640k, round 2)") || strings.Contains(got, "XDP") {
		t.Errorf("got %q", got)
	}
	r.Switch = SwitchXDP
	if got := r.switchDropsLine(); !strings.Contains(got, "compare large responses on --switch stack") {
		t.Errorf("the xdp switch's losses without their reason: %q", got)
	}
	if got := (&LBResults{Cells: []LBCell{{Rounds: []LBSample{{}}}}}).switchDropsLine(); got != "" {
		t.Errorf("unmeasured drops reported: %q", got)
	}
}

func TestDropShare(t *testing.T) {
	if got := dropShare(portFrames{sent: 100, dropped: 5}, portFrames{sent: 1000, dropped: 105}); got == nil || *got != 0.1 {
		t.Errorf("900 sent and 100 dropped: %v, want 0.1", got)
	}
	for _, c := range []struct {
		name          string
		before, after portFrames
	}{
		{"counters went back", portFrames{sent: 100}, portFrames{sent: 50}},
		{"no frame", portFrames{sent: 7, dropped: 1}, portFrames{sent: 7, dropped: 1}},
	} {
		if got := dropShare(c.before, c.after); got != nil {
			t.Errorf("%s: %v, want none", c.name, *got)
		}
	}
}
