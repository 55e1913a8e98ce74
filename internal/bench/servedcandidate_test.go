package bench

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
)

// TestServedCandidates: the candidates run by a daemon are measured only when named, and their
// config is one Sluice takes: with a sync section over the backends' side for -sync, the same
// without it for -served.
func TestServedCandidates(t *testing.T) {
	all, _, err := selectCandidates(nil)
	served := func(c candidate) bool {
		return strings.HasSuffix(c.Name(), "-sync") || strings.HasSuffix(c.Name(), "-served")
	}
	if err != nil || slices.ContainsFunc(all, served) {
		t.Errorf("all candidates %v (%v): the -sync and -served ones are measured only when named", all, err)
	}
	cs, _, err := selectCandidates([]string{"ebpf-nat-sync", "nft-fullnat-sync", "nft-fullnat-served"})
	if err != nil || len(cs) != 5 || cs[2].Name() != "nft-fullnat-sync" || cs[3].Name() != "ebpf-nat-sync" || cs[4].Name() != "nft-fullnat-served" {
		t.Fatalf("selected %v, %v: want the baselines, nft-fullnat-sync, ebpf-nat-sync and nft-fullnat-served", cs, err)
	}
	dir := t.TempDir()
	e := NewEnv("x", 3, "/bin/true", "/bin/true", nil)
	for _, c := range cs[2:] {
		text := c.(*servedCandidate).config(e, "/etc/sluice/sync.key", dir)
		path := filepath.Join(dir, c.Name()+".yaml")
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(path)
		if err != nil {
			t.Errorf("%s's config: %v\n%s", c.Name(), err, text)
			continue
		}
		replicates := c.(*servedCandidate).replicates
		if replicates != (cfg.Sync != nil) || replicates && (cfg.Sync.Interface != "eth1" || len(cfg.Sync.Peers) != 1) {
			t.Errorf("%s's sync section: %+v", c.Name(), cfg.Sync)
		}
	}
}
