package cli

import (
	"bytes"
	"encoding/gob"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/sluicelb/sluice/internal/boundedread"
	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath/nft"
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
		rec := readLastApply(path, slog.New(slog.DiscardHandler))
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

// TestLastApplyIgnoresABadFile reads a file that is not a last apply, or another binary's, as
// none: the apply then reads the kernel.
func TestLastApplyIgnoresABadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "last-apply.gob")
	if err := os.WriteFile(path, []byte("datapath: nft\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if rec := readLastApply(path, slog.New(slog.DiscardHandler)); rec != nil {
		t.Errorf("a YAML file read as a last apply: %+v", rec)
	}
	if rec := readLastApply(filepath.Join(t.TempDir(), "none"), slog.New(slog.DiscardHandler)); rec != nil {
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
	if rec := readLastApply(path, slog.New(slog.DiscardHandler)); rec != nil {
		t.Errorf("another binary's last apply read as this one's: %+v", rec)
	}
}
