package replication

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath/fake"
	"github.com/sluicelb/sluice/internal/flowsync"
)

func TestNeeds(t *testing.T) {
	sync := &config.Sync{Interface: "eth1"}
	for _, c := range []struct {
		cfg  config.Config
		want needs
	}{
		{config.Config{Datapath: config.DatapathNFT}, needs{}},
		{config.Config{Datapath: config.DatapathNFT, Sync: sync}, needs{conntrackd: true}},
		{config.Config{Datapath: config.DatapathEBPF, Sync: sync}, needs{flows: true}},
		{config.Config{Datapath: config.DatapathEBPF, Sync: sync, Services: []config.Service{{SYNProtection: true}}}, needs{conntrackd: true, flows: true}},
	} {
		if got := needsOf(&c.cfg); got != c.want {
			t.Errorf("needsOf(%s, sync %v, %d services) = %+v, want %+v", c.cfg.Datapath, c.cfg.Sync != nil, len(c.cfg.Services), got, c.want)
		}
	}
}

// TestCheckNamesTheField: a sync section the host cannot run is refused naming the field: a
// secret file that is missing, short or not a regular file, a datapath that cannot replicate, an
// interface that does not exist (it only reads the host's links).
func TestCheckNamesTheField(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("tooshort\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte("0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := New(t.Context(), fake.New(), dir, slog.New(slog.DiscardHandler), func(Event) {})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		secret, datapath, iface, peer string
		want                          string
	}{
		{filepath.Join(dir, "missing"), "nft", "eth1", "10.0.0.2", "sync.secret_file: open"},
		{short, "nft", "eth1", "10.0.0.2", "sync.secret_file: " + short + " holds 8 bytes: the secret must be at least 16"},
		{"/dev/zero", "nft", "eth1", "10.0.0.2", "sync.secret_file: /dev/zero: is a character device, not a regular file"},
		{good, "ebpf", "eth1", "10.0.0.2", "sync: this datapath cannot replicate its flows"},
		{good, "nft", "sluicenone0", "10.0.0.2", "sync.interface: sluicenone0: no such interface"},
	} {
		cfg := &config.Config{Datapath: config.Datapath(c.datapath), Sync: &config.Sync{Interface: c.iface, Peers: []config.IP{config.IPOf(c.peer)}, SecretFile: c.secret}}
		if err := r.Check(cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Check(secret %s, %s, %s, peer %s) = %v, want %q", c.secret, c.datapath, c.iface, c.peer, err, c.want)
		}
	}
	if ready, why := r.Ready(); !ready || why != "no sync section" {
		t.Errorf("Ready() without a section = %v, %q", ready, why)
	}
	if err := r.Set(&config.Config{}); err != nil {
		t.Errorf("Set without a section: %v", err)
	}
}

// TestRefreshIntervalBoundsAreFlowsync's: the sync section's refresh_interval bounds and default
// are the flowsync package's (config does not import it).
func TestRefreshIntervalBoundsAreFlowsyncs(t *testing.T) {
	if config.DefaultRefreshInterval != flowsync.DefaultRefreshInterval || config.MinRefreshInterval != flowsync.MinRefreshInterval ||
		config.MaxRefreshInterval != flowsync.MaxRefreshInterval {
		t.Errorf("config's refresh interval %s (%s-%s), flowsync's %s (%s-%s)", config.DefaultRefreshInterval, config.MinRefreshInterval,
			config.MaxRefreshInterval, flowsync.DefaultRefreshInterval, flowsync.MinRefreshInterval, flowsync.MaxRefreshInterval)
	}
}
