package bench

import (
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/procfs"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath/nft"
	"github.com/sluicelb/sluice/internal/lab"
	"github.com/sluicelb/sluice/internal/plan"
)

// TestScaleExtraServiceIsOneMore: the config with extraService appended has one service more, of
// as many backends as the others, on a VIP of its own.
func TestScaleExtraServiceIsOneMore(t *testing.T) {
	real := []netip.Addr{netip.MustParseAddr("10.91.2.11")}
	c := scaleConfig{datapath: "nft", services: 300, perService: 2, real: real}
	cfg, err := config.Parse("scale.yaml", []byte(c.yaml(2)+c.extraService()))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Services) != c.services+1 {
		t.Fatalf("%d services, want %d", len(cfg.Services), c.services+1)
	}
	extra := cfg.Services[c.services]
	if extra.Name != serviceName(c.services) || len(extra.Backends) != c.perService {
		t.Errorf("the extra service: %s of %d backends", extra.Name, len(extra.Backends))
	}
	for _, s := range cfg.Services[:c.services] {
		if s.VIP == extra.VIP {
			t.Errorf("the extra service shares %s's VIP %s", s.Name, s.VIP)
		}
	}
}

func TestScaleConfigIsValidAndSized(t *testing.T) {
	real := []netip.Addr{netip.MustParseAddr("10.91.2.11"), netip.MustParseAddr("10.91.2.12"), netip.MustParseAddr("10.91.2.13")}
	for _, c := range []scaleConfig{
		{datapath: "nft", services: 1, perService: 10, real: real},
		{datapath: "nft", services: 300, perService: 2, real: real},
		{datapath: "nft", services: 3, perService: 160, real: real},
	} {
		cfg, err := config.Parse("scale.yaml", []byte(c.yaml(2)))
		if err != nil {
			t.Fatalf("%d services x %d: %v", c.services, c.perService, err)
		}
		if len(cfg.Services) != c.services {
			t.Fatalf("%d services, want %d", len(cfg.Services), c.services)
		}
		for i, s := range cfg.Services {
			want := c.perService
			if s.Name == c.target() {
				want += 2
			}
			if len(s.Backends) != want || cfg.Datapath != "nft" {
				t.Errorf("service %s: %d backends, want %d", s.Name, len(s.Backends), want)
			}
			if i > 0 && s.VIP.String() == lab.VIP4 {
				t.Errorf("service %s shares the real service's VIP", s.Name)
			}
		}
		real := cfg.Services[0]
		if real.VIP.String() != lab.VIP4 || real.Port.First != 80 {
			t.Errorf("the real service listens on %s:%s", real.VIP, real.Port)
		}
		for j, b := range real.Backends {
			if weighted := b.WeightOrDefault() > 0; weighted != (j < min(len(c.real), c.perService) || c.services == 1 && j >= c.perService) {
				t.Errorf("real service backend %d (%s) weighted %v: only the lab's backends (and, at size 1, the added ones) take traffic", j, b.Address, weighted)
			}
		}
	}
}

func TestScaleConfigTargetAndExtraBackends(t *testing.T) {
	c := scaleConfig{datapath: "nft", services: 5, perService: 10}
	if c.target() != "svc4" {
		t.Errorf("target %s", c.target())
	}
	if c.extraBackend(1) != fakeBackend(10) || c.extraBackend(1) == c.extraBackend(2) {
		t.Errorf("extra backends %s %s", c.extraBackend(1), c.extraBackend(2))
	}
	if got := fakeBackend(150); got.String() != "10.91.2.100:8081" {
		t.Errorf("fakeBackend(150) = %s", got)
	}
}

func TestScaleOptionsCheck(t *testing.T) {
	ok := ScaleOptions{Datapaths: []string{"nft"}, Services: []int{1, 10}, BackendsPerService: 10, Reps: 1, Rounds: 1, Limit: time.Minute, Load: time.Second}
	if err := ok.Check(); err != nil {
		t.Fatal(err)
	}
	for name, change := range map[string]func(*ScaleOptions){
		"no sizes":        func(o *ScaleOptions) { o.Services = nil },
		"zero services":   func(o *ScaleOptions) { o.Services = []int{0} },
		"too many":        func(o *ScaleOptions) { o.Services = []int{MaxScaleServices + 1} },
		"no backends":     func(o *ScaleOptions) { o.BackendsPerService = 0 },
		"no reps":         func(o *ScaleOptions) { o.Reps = 0 },
		"load past limit": func(o *ScaleOptions) { o.Load = time.Minute },
	} {
		o := ok
		change(&o)
		if o.Check() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestScaleTableAndRatios(t *testing.T) {
	results := []ScaleResult{
		{Datapath: "nft", Services: 1, Backends: 10, ApplyAll: 0.05, AddOneApply: 0.04, AddOneDaemon: 0.012, DaemonApply: 0.0031, DaemonStart: 1.25, DaemonRSS: 20 << 20, KernelMemory: 1 << 20, RequestsPerSecond: 50000},
		{Datapath: "nft", Services: 100, Backends: 1000, ApplyAll: 1.5, RequestsPerSecond: 40000},
		{Datapath: "nft", Services: 1000, Backends: 10000, NotReached: "apply all: took over 1m0s"},
	}
	setRatios(results)
	if results[0].Ratio != 1 || results[1].Ratio != 0.8 || results[2].Ratio != 0 {
		t.Fatalf("ratios %v %v %v", results[0].Ratio, results[1].Ratio, results[2].Ratio)
	}
	table := ScaleReport{Options: ScaleOptions{Reps: 3, Rounds: 3}, Results: results}.Table()
	for _, want := range []string{"12.0ms", "3.1ms", "1.25s", "1.50s", "20.0 MiB", "50000", "0.80", "nft, 1000 services: not reached: apply all: took over 1m0s"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}

func TestMemBytes(t *testing.T) {
	m, err := memBytes(fixtureProc(t), memAvailable, memTotal, sUnreclaim, percpu, vmallocUsed)
	want := []int64{22769964 << 10, 24684096 << 10, 123456 << 10, 9876 << 10, 54321 << 10}
	if err != nil || !slices.Equal(m, want) {
		t.Fatalf("meminfo %v, %v; want %v", m, err, want)
	}
	missing := memField{"NoSuchField", func(procfs.Meminfo) *uint64 { return nil }}
	if _, err := memBytes(fixtureProc(t), memTotal, missing); err == nil || !strings.Contains(err.Error(), "NoSuchField") {
		t.Errorf("a missing field: %v, want an error naming it", err)
	}
	if got := kernelMemoryNames(); got != "SUnreclaim+Percpu+VmallocUsed" {
		t.Errorf("kernel memory fields %q", got)
	}
}

func TestHostMemory(t *testing.T) {
	if m, err := hostMemory(memTotal, memAvailable); err != nil || m[0] <= 0 || m[1] > m[0] {
		t.Errorf("this machine's meminfo %v, %v", m, err)
	}
	if rss, err := residentMemory(os.Getpid()); err != nil || rss <= 0 {
		t.Errorf("this process's VmRSS %d, %v", rss, err)
	}
}

// TestScaleConfigFitsTheNFTBudget: the nft configs of bench scale's sizes, with the extra
// backends of its reps, pass the nft datapath's budget (10,000 services of 2 backends need more
// than nft.max_elements' default).
func TestScaleConfigFitsTheNFTBudget(t *testing.T) {
	for _, c := range []scaleConfig{
		{datapath: "nft", services: 10000, perService: 2},
		{datapath: "nft", services: 1000, perService: 10},
		{datapath: "nft", services: 10000, perService: 10},
	} {
		cfg, err := config.Parse("scale.yaml", []byte(c.yaml(4)))
		if err != nil {
			t.Fatalf("%d services x %d: %v", c.services, c.perService, err)
		}
		p, err := plan.Build(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := (&nft.Datapath{}).Budget(p); err != nil {
			t.Errorf("%d services x %d: %v", c.services, c.perService, err)
		}
	}
}
