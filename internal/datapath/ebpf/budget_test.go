package ebpf

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath"
)

// TestBudgetNamesMaglevSlots: a plan whose tables exceed ebpf.maglev_slots is refused before
// anything is loaded, naming the key, the numbers and what to do.
func TestBudgetNamesMaglevSlots(t *testing.T) {
	p := planFromYAML(t, "datapath: ebpf\nservices:\n  - {name: web, vip: 10.91.9.100, port: 80, table_size: 65537, backends: [{address: 10.91.2.11}]}\n")
	d, err := New(nil, Options{Sizes: MapSizes{MaglevSlots: 1 << 17}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Budget(p); err != nil {
		t.Fatalf("65,537 slots in 131,072: %v", err)
	}
	p.Services = append(p.Services, p.Services[0])
	p.Services[1].Name = "web2"
	err = d.Budget(p)
	var over *datapath.BudgetError
	if !errors.As(err, &over) || over.Field != "ebpf.maglev_slots" || over.Need != 2*65537 || over.Limit != 1<<17 {
		t.Fatalf("Budget = %v", err)
	}
	if !strings.Contains(err.Error(), "raise ebpf.maglev_slots") {
		t.Errorf("%q does not say what to do", err)
	}
}

// TestCheckMemoryRefusesHalfTheMachine: the largest sizes the config accepts preallocate about
// 20 GB; on a 24 GB machine that is refused, the defaults (about 420 MB) are not.
func TestCheckMemoryRefusesHalfTheMachine(t *testing.T) {
	const machine = 24 << 30
	huge := config.EBPFSizes{MaxFlows: config.MaxMaxFlows, MaglevSlots: config.MaxMaglevSlots}
	var over *datapath.BudgetError
	if err := CheckMemory(huge, machine); !errors.As(err, &over) || !strings.Contains(err.Error(), "ebpf.max_flows") {
		t.Fatalf("CheckMemory(max sizes) = %v", err)
	}
	defaults := (&config.Config{}).EBPFMapSizes()
	if err := CheckMemory(defaults, machine); err != nil {
		t.Fatalf("CheckMemory(defaults) = %v", err)
	}
}

// TestConfigKnowsTheVIPTable: config refuses what the program's vips map cannot hold, by the
// same number.
func TestConfigKnowsTheVIPTable(t *testing.T) {
	l, err := defaultLimits()
	if err != nil {
		t.Fatal(err)
	}
	if int(l.vips) != config.MaxEBPFVIPPorts {
		t.Errorf("the vips map holds %d entries, config.MaxEBPFVIPPorts says %d", l.vips, config.MaxEBPFVIPPorts)
	}
}
