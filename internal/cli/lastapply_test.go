package cli

import (
	"bytes"
	"encoding/gob"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	cebpf "github.com/cilium/ebpf"

	"github.com/sluicelb/sluice/internal/boundedread"
	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath/ebpf"
	"github.com/sluicelb/sluice/internal/datapath/nft"
	"github.com/sluicelb/sluice/internal/maglev"
	"github.com/sluicelb/sluice/internal/plan"
)

// TestLastApplyRoundTrips keeps the plan of every nft golden config and reads it back: every
// service is Equal to the one built from the file, so the next apply renders none of them again.
func TestLastApplyRoundTrips(t *testing.T) {
	files, _ := filepath.Glob("../datapath/nft/testdata/golden/*/config.yaml")
	if len(files) == 0 {
		t.Fatal("no golden config")
	}
	for _, file := range files {
		data, err := boundedread.File(file, boundedread.ConfigBytes)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Parse(file, data)
		if err != nil {
			t.Fatal(err)
		}
		p, err := plan.Build(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		committed := nft.Committed{Namespace: "boot/1", Generation: 7, DSRDevices: []string{"eth0"},
			Devices: map[string]map[netip.Addr]string{"web": {netip.MustParseAddr("10.0.0.1"): "eth1"}}}
		path := filepath.Join(t.TempDir(), "last-apply.gob")
		if err := writeLastApply(path, lastApply{Plan: p, NFT: committed}); err != nil {
			t.Fatal(err)
		}
		rec := readLastApply(path, nil, slog.New(slog.DiscardHandler))
		if rec == nil {
			t.Fatalf("%s: the last apply does not read back", file)
		}
		if !rec.Plan.Equal(p) {
			for i := range p.Services {
				if !rec.Plan.Services[i].Equal(&p.Services[i]) {
					t.Errorf("%s: service %s reads back as\n%+v\nwant\n%+v", file, p.Services[i].Name, rec.Plan.Services[i], p.Services[i])
				}
			}
			t.Errorf("%s: the plan does not read back Equal", file)
		}
		if !reflect.DeepEqual(rec.NFT, committed) {
			t.Errorf("%s: committed reads back as %+v, want %+v", file, rec.NFT, committed)
		}
	}
}

// TestLastApplyKeepsEBPFTables keeps the plan of a config on ebpf, whose Maglev tables of 1021
// slots are packed, with what the ebpf datapath committed, and reads both back.
func TestLastApplyKeepsEBPFTables(t *testing.T) {
	cfg, err := config.Parse("ebpf.yaml", []byte(`datapath: ebpf
services:
  - name: web
    vip: 10.0.0.1
    port: 80
    backends: [{address: 10.1.0.1}, {address: 10.1.0.2, weight: 3}, {address: 10.1.0.3, weight: 0}]
  - name: idle
    vip: 10.0.0.2
    port: 80
    backends: [{address: 10.1.0.4, weight: 0}]
`))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(maglev.Forget)
	maglev.Remember(nil)
	p, err := plan.Build(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	committed := ebpf.Committed{Boot: "b", PinPath: "/sys/fs/bpf/sluice", Maps: map[string]cebpf.MapID{"vips": 7}, Token: 9, ProgTag: "t", ProgMaps: []cebpf.MapID{7}}
	path := filepath.Join(t.TempDir(), "last-apply.gob")
	if err := writeLastApply(path, lastApply{Plan: p, EBPF: committed}); err != nil {
		t.Fatal(err)
	}
	if len(p.Services[1].Slots) != 1021 {
		t.Fatalf("keeping the apply changed the plan's tables: %d slots", len(p.Services[1].Slots))
	}
	if rec := decodeLastApply(path, slog.New(slog.DiscardHandler)); rec == nil || len(rec.Tables) != 1 || rec.Slots[1].Table == "" {
		t.Fatalf("the last apply keeps the table of web as %+v, want it among the tables built", rec)
	}
	rec := readLastApply(path, nil, slog.New(slog.DiscardHandler))
	if rec == nil || !rec.Plan.Equal(p) || !reflect.DeepEqual(rec.EBPF, committed) {
		t.Fatalf("the last apply reads back as %+v, want the plan and %+v", rec, committed)
	}
	// Read for a plan with the same tables, it shares them; for another table, it unpacks its own.
	if rec = readLastApply(path, p, slog.New(slog.DiscardHandler)); rec == nil || &rec.Plan.Services[1].Slots[0] != &p.Services[1].Slots[0] {
		t.Error("the last apply does not share the table of web with the same plan")
	}
	other := *p
	other.Services = slices.Clone(p.Services)
	other.Services[1].Slots = slices.Repeat([]int{0}, 1021)
	if rec = readLastApply(path, &other, slog.New(slog.DiscardHandler)); rec == nil || !rec.Plan.Equal(p) {
		t.Error("the last apply read for another table of web is not the plan applied")
	}
}

// TestLastApplyIgnoresABadFile reads a file that is not a last apply, or another binary's, as
// none: the apply then reads the kernel.
func TestLastApplyIgnoresABadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "last-apply.gob")
	if err := os.WriteFile(path, []byte("datapath: nft\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if rec := readLastApply(path, nil, slog.New(slog.DiscardHandler)); rec != nil {
		t.Errorf("a YAML file read as a last apply: %+v", rec)
	}
	if rec := readLastApply(filepath.Join(t.TempDir(), "none"), nil, slog.New(slog.DiscardHandler)); rec != nil {
		t.Errorf("a missing file read as a last apply: %+v", rec)
	}
	other := lastApply{Plan: &plan.Plan{Datapath: config.DatapathNFT}}
	other.markEmpty()
	other.Binary = "/usr/sbin/sluice 1 2" // written by another binary
	var data bytes.Buffer
	if err := gob.NewEncoder(&data).Encode(other); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if rec := readLastApply(path, nil, slog.New(slog.DiscardHandler)); rec != nil {
		t.Errorf("another binary's last apply read as this one's: %+v", rec)
	}
}

// TestLastApplyOfAnUpgrade: another binary's last apply is trusted on nft when it has the same
// file format and nft.RenderVersion (an upgrade that did not change the rules), and only then.
func TestLastApplyOfAnUpgrade(t *testing.T) {
	nftPlan, ebpfPlan := &plan.Plan{Datapath: config.DatapathNFT}, &plan.Plan{Datapath: config.DatapathEBPF}
	for _, c := range []struct {
		name string
		rec  lastApply
		want bool
	}{
		{"same renderer", lastApply{Plan: nftPlan, Format: lastApplyFormat, NFTRender: nft.RenderVersion}, true},
		{"another renderer", lastApply{Plan: nftPlan, Format: lastApplyFormat, NFTRender: nft.RenderVersion + 1}, false},
		{"written before formats", lastApply{Plan: nftPlan, NFTRender: nft.RenderVersion}, false},
		{"another format", lastApply{Plan: nftPlan, Format: lastApplyFormat + 1, NFTRender: nft.RenderVersion}, false},
		{"ebpf", lastApply{Plan: ebpfPlan, Format: lastApplyFormat, NFTRender: nft.RenderVersion}, false},
		{"this binary's ebpf", lastApply{Plan: ebpfPlan, Binary: thisBinary()}, true},
	} {
		if c.rec.Binary == "" {
			c.rec.Binary = "/usr/sbin/sluice 1 2"
		}
		if got := c.rec.sameRenderer(); got != c.want {
			t.Errorf("%s: trusted %v, want %v", c.name, got, c.want)
		}
	}
	// Written by this binary, then read as another binary of the same renderer would.
	path := filepath.Join(t.TempDir(), "last-apply.gob")
	if err := writeLastApply(path, lastApply{Plan: nftPlan}); err != nil {
		t.Fatal(err)
	}
	rec := decodeLastApply(path, slog.New(slog.DiscardHandler))
	if rec == nil || rec.Format != lastApplyFormat || rec.NFTRender != nft.RenderVersion {
		t.Fatalf("the file keeps %+v, want format %d and render version %d", rec, lastApplyFormat, nft.RenderVersion)
	}
	rec.Binary = "/usr/sbin/sluice 1 2"
	if !rec.sameRenderer() {
		t.Error("an upgrade of the same renderer does not trust the file")
	}
}

// TestForgetLastApply removes the file, and a missing one is no error.
func TestForgetLastApply(t *testing.T) {
	path := filepath.Join(t.TempDir(), "last-apply.gob")
	if err := writeLastApply(path, lastApply{Plan: &plan.Plan{}}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := forgetLastApply(path); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the last apply is still there: %v", err)
	}
}

// TestLastApplySharesOneTable reads back a last apply whose services share a table: those whose
// table in the next plan is that one share it, one whose table differs gets the one applied.
func TestLastApplySharesOneTable(t *testing.T) {
	p, path := appliedPlan(t, []byte(`datapath: ebpf
services:
  - {name: a, vip: 10.0.0.1, port: 80, backends: [{address: 10.1.0.1}, {address: 10.1.0.2}]}
  - {name: b, vip: 10.0.0.2, port: 80, backends: [{address: 10.1.0.1}, {address: 10.1.0.2}]}
  - {name: c, vip: 10.0.0.3, port: 80, backends: [{address: 10.1.0.1}, {address: 10.1.0.2}]}
`))
	next := *p
	next.Services = slices.Clone(p.Services)
	next.Services[2].Slots = slices.Clone(p.Services[2].Slots)
	next.Services[2].Slots[0] = 1 - next.Services[2].Slots[0]
	rec := readLastApply(path, &next, slog.New(slog.DiscardHandler))
	if rec == nil || !rec.Plan.Equal(p) {
		t.Fatalf("the last apply reads back as %+v, want the plan applied", rec)
	}
	for _, i := range []int{0, 1} {
		if &rec.Plan.Services[i].Slots[0] != &next.Services[i].Slots[0] {
			t.Errorf("service %s does not share the next plan's table", p.Services[i].Name)
		}
	}
	if &rec.Plan.Services[2].Slots[0] == &next.Services[2].Slots[0] {
		t.Error("service c took the next plan's table, which differs from the one applied")
	}
}

// appliedPlan builds the plan of an ebpf config, its Maglev tables remembered, and writes it as
// the last apply to a file under tb's temporary directory.
func appliedPlan(tb testing.TB, text []byte) (*plan.Plan, string) {
	tb.Helper()
	cfg, err := config.Parse("ebpf.yaml", text)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(maglev.Forget)
	maglev.Remember(nil)
	p, err := plan.Build(cfg, nil)
	if err != nil {
		tb.Fatal(err)
	}
	path := filepath.Join(tb.TempDir(), "last-apply.gob")
	if err := writeLastApply(path, lastApply{Plan: p, EBPF: ebpf.Committed{Boot: "b"}}); err != nil {
		tb.Fatal(err)
	}
	return p, path
}

// BenchmarkReadLastApply10kServices reads the last apply of 10,000 services on ebpf (tables of
// 1021 slots) for the next plan, as plan -f and apply -f do (issue 32).
func BenchmarkReadLastApply10kServices(b *testing.B) {
	var text bytes.Buffer
	text.WriteString("datapath: ebpf\nservices:\n")
	for i := range 10000 {
		fmt.Fprintf(&text, "- {name: svc%d, vip: 10.92.%d.%d, port: 80, backends: [{address: 10.91.2.100}, {address: 10.91.2.101}]}\n", i, i/256, i%256)
	}
	p, path := appliedPlan(b, text.Bytes())
	b.ReportAllocs()
	for b.Loop() {
		if readLastApply(path, p, slog.New(slog.DiscardHandler)) == nil {
			b.Fatal("the last apply does not read back")
		}
	}
}
