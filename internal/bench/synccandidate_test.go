package bench

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
)

// TestSyncedCandidates: the replicating candidates are measured only when named, and their
// config is one Sluice takes: a sync section over the backends' side.
func TestSyncedCandidates(t *testing.T) {
	all, _, err := selectCandidates(nil)
	if err != nil || slices.ContainsFunc(all, func(c candidate) bool { return strings.HasSuffix(c.Name(), "-sync") }) {
		t.Errorf("all candidates %v (%v): the -sync ones are measured only when named", all, err)
	}
	cs, _, err := selectCandidates([]string{"ebpf-nat-sync", "nft-fullnat-sync"})
	if err != nil || len(cs) != 4 || cs[2].Name() != "nft-fullnat-sync" || cs[3].Name() != "ebpf-nat-sync" {
		t.Fatalf("selected %v, %v: want the baselines, nft-fullnat-sync and ebpf-nat-sync", cs, err)
	}
	dir := t.TempDir()
	e := NewEnv("x", 3, "/bin/true", "/bin/true", nil)
	for _, c := range cs[2:] {
		text := c.(*syncedCandidate).config(e, "/etc/sluice/sync.key", dir)
		path := filepath.Join(dir, c.Name()+".yaml")
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(path)
		if err != nil {
			t.Errorf("%s's config: %v\n%s", c.Name(), err, text)
			continue
		}
		if cfg.Sync == nil || cfg.Sync.Interface != "eth1" || len(cfg.Sync.Peers) != 1 {
			t.Errorf("%s's sync section: %+v", c.Name(), cfg.Sync)
		}
	}
}
