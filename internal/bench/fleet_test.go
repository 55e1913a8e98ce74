package bench

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/lab"
)

func goodFleetOptions() FleetOptions {
	return FleetOptions{Nodes: 3, Datapaths: []string{"nft", "ebpf"}, Duration: time.Second, Rounds: 1, Failover: 12 * time.Second}
}

func TestFleetOptionsCheck(t *testing.T) {
	if err := goodFleetOptions().Check(); err != nil {
		t.Fatalf("good options refused: %v", err)
	}
	tests := []struct {
		change func(*FleetOptions)
		flag   string
	}{
		{func(o *FleetOptions) { o.Nodes = 1 }, "--nodes"},
		{func(o *FleetOptions) { o.Nodes = lab.MaxBalancers + 1 }, "--nodes"},
		{func(o *FleetOptions) { o.Duration = 500 * time.Millisecond }, "--duration"},
		{func(o *FleetOptions) { o.Rounds = 0 }, "--rounds"},
		{func(o *FleetOptions) { o.Failover = 5 * time.Second }, "--failover"},
		{func(o *FleetOptions) { o.Datapaths = nil }, "--datapath"},
		{func(o *FleetOptions) { o.Datapaths = []string{"ipvs"} }, "--datapath"},
		{func(o *FleetOptions) { o.Datapaths = []string{"ebpf", "ebpf"} }, "--datapath"},
		{func(o *FleetOptions) { o.Workloads = []string{"64k"} }, "--workloads"},
		{func(o *FleetOptions) { o.Workloads = []string{"nope"} }, "--workloads"},
	}
	for _, tt := range tests {
		o := goodFleetOptions()
		tt.change(&o)
		if err := o.Check(); err == nil || !strings.HasPrefix(err.Error(), tt.flag+":") {
			t.Errorf("%+v: err %v, want one naming %s", o, err, tt.flag)
		}
	}
	o := goodFleetOptions()
	o.Workloads = []string{"per-conn", "keepalive"}
	if ws, err := o.workloads(); err != nil || len(ws) != 2 || ws[0].Name != "keepalive" {
		t.Errorf("workloads %v, %v: want keepalive then per-conn", ws, err)
	}
}

func TestFleetCells(t *testing.T) {
	ws, err := goodFleetOptions().workloads()
	if err != nil {
		t.Fatal(err)
	}
	samples := map[fleetKey][]LBSample{}
	for _, w := range ws {
		for n, rps := range []float64{1000, 800, 700} { // direct, 1 node, 2 nodes
			samples[fleetKey{w.Name, n}] = []LBSample{{RPS: rps * 2, Errors: 1}, {RPS: rps, Errors: 2}, {RPS: rps / 2}}
		}
	}
	cells := fleetCells("ebpf", 2, ws, samples)
	if len(cells) != 2*3 {
		t.Fatalf("%d cells, want 6", len(cells))
	}
	res := &FleetResults{Cells: cells}
	for _, w := range ws {
		direct, _ := res.Cell("ebpf", w.Name, 0)
		one, _ := res.Cell("ebpf", w.Name, 1)
		two, ok := res.Cell("ebpf", w.Name, 2)
		if !ok || direct.RPS != 1000 || one.RPS != 800 || two.RPS != 700 || two.Errors != 3 || len(two.Rounds) != 3 {
			t.Fatalf("%s: medians wrong: %+v %+v %+v", w.Name, direct, one, two)
		}
		if direct.RatioDirect != 1 || one.RatioOne != 1 || two.RatioOne != 700.0/800 || two.RatioDirect != 0.7 || direct.RatioOne != 1.25 {
			t.Errorf("%s: ratios wrong: %+v %+v %+v", w.Name, direct, one, two)
		}
	}
	data, err := json.Marshal(cells[0])
	if err != nil || !strings.Contains(string(data), `"requests_per_second":1000,`) || !strings.Contains(string(data), `"ratio_to_one_node":1.25`) {
		t.Errorf("a cell's JSON lacks its figures at the top: %s %v", data, err)
	}
}

func TestSummarizeFailover(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	reqs := []request{
		{ms(0), ms(100), true}, {ms(500), ms(900), true}, // before the cut at 1 s
		{ms(900), ms(1100), true},                                                          // across the cut: neither before nor after
		{ms(1200), ms(3200), false},                                                        // failed before the reconvergence at 2 s
		{ms(2100), ms(2200), true}, {ms(2500), ms(3900), true}, {ms(3000), ms(3500), true}, // after
		{ms(2600), ms(4600), false}, // failed after
		{ms(3900), ms(4100), true},  // ended after the run
	}
	fo := summarizeFailover(reqs, 4*time.Second, time.Second, 2*time.Second)
	if fo.Requests != 9 || fo.Failed != 2 || fo.FailedAfter != 1 || fo.RPSBefore != 2 || fo.RPSAfter != 1.5 || fo.CutAtS != 1 || fo.DurationS != 4 {
		t.Errorf("summary %+v", fo)
	}
	if late := summarizeFailover(reqs, 4*time.Second, time.Second, 5*time.Second); late.RPSAfter != 0 {
		t.Errorf("a reconvergence after the run still has requests/s after it: %+v", late)
	}
}

func TestFleetConfig(t *testing.T) {
	l := lab.New("sbf-test", 3)
	l.Balancers = 3
	for _, dp := range config.Datapaths {
		text := fleetConfig(l, string(dp))
		c, err := config.Parse("fleet.yaml", []byte(text))
		if err != nil {
			t.Fatalf("%s: the nodes' config does not parse: %v\n%s", dp, err, text)
		}
		if len(c.Services) != 1 || c.Services[0].Mode != "dsr" || len(c.Services[0].Backends) != 3 || c.BGP == nil ||
			len(c.BGP.Peers) != 1 || c.BGP.Peers[0].Address.Addr != l.RouterFrontAddr(false) {
			t.Errorf("%s: config %+v", dp, c)
		}
	}
}

func TestFleetTable(t *testing.T) {
	ws, _ := goodFleetOptions().workloads()
	o := goodFleetOptions()
	o.Nodes, o.Datapaths = 2, []string{"ebpf"}
	samples := map[fleetKey][]LBSample{}
	for _, w := range ws {
		for n := range 3 {
			samples[fleetKey{w.Name, n}] = []LBSample{{RPS: 1000}}
		}
	}
	r := &FleetResults{Options: o, Backends: 3, Cores: 2, Workloads: ws, Note: fleetNote(2), Cells: fleetCells("ebpf", 2, ws, samples),
		Failover: []FleetFailover{summarizeFailover(nil, 12*time.Second, 4*time.Second, 11*time.Second)}}
	r.Failover[0].Datapath, r.Failover[0].ReconvergenceS = "ebpf", 7
	table := r.Table()
	for _, want := range []string{"direct", "1 node", "2 nodes", "keepalive", "per-conn", "2 CPU cores", "not capacity scaling", "node", "7.00s"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	r.Failover[0].ReconvergenceS = 9
	if table := r.Table(); !strings.Contains(table, "the run ended first") {
		t.Errorf("a reconvergence after the run is not said:\n%s", table)
	}
}
