package engine

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/state"
	"github.com/sluicelb/sluice/internal/testutil"
)

// startSaving starts an engine on a config file whose running config is saved to a state file in
// dir (the file's own state section decides), like sluice serve.
func startSaving(t *testing.T, dir, text string, opts Options) (*harness, string) {
	t.Helper()
	file := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	store, _, err := state.Open(file, filepath.Join(dir, "running.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	opts.ConfigPath, opts.State = file, store
	return start(t, text, opts), file
}

// reopen tells what a restart would start from.
func reopen(t *testing.T, file, dir string) (state.Start, *config.Config) {
	t.Helper()
	store, cfg, err := state.Open(file, filepath.Join(dir, "running.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return store.Start(), cfg
}

func addBackend(h *harness, addr string) error {
	_, err := h.Update(false, "test", func(cfg *config.Config) error {
		s, _, err := FindService(cfg, "web")
		if err == nil {
			s.Backends = append(s.Backends, config.Backend{Address: config.IPOf(addr)})
		}
		return err
	})
	return err
}

func hasBackend(cfg *config.Config, addr string) bool {
	s, _, err := FindService(cfg, "web")
	return err == nil && s.Backends[len(s.Backends)-1].Address.String() == addr
}

func TestChangesAreSavedAndReloadReplacesThem(t *testing.T) {
	dir := t.TempDir()
	h, file := startSaving(t, dir, twoServices, Options{})
	if !h.hasEvent(EventConfigSource, "") {
		t.Fatal("no config_source event on start")
	}
	if err := addBackend(h, "10.0.1.9"); err != nil {
		t.Fatal(err)
	}
	// Saved before Update returned: a restart now starts from the change.
	if start, cfg := reopen(t, file, dir); start.Source != state.FromStateFile || !hasBackend(cfg, "10.0.1.9") {
		t.Fatalf("after a change: %+v", start)
	}
	if _, err := h.Reload(); err != nil {
		t.Fatal(err)
	}
	if start, cfg := reopen(t, file, dir); start.Source != state.FromStateFile || hasBackend(cfg, "10.0.1.9") {
		t.Fatalf("after a reload the state still holds the change: %+v", start)
	}
}

func TestAFailedSaveKeepsTheChangeAndIsReported(t *testing.T) {
	dir := t.TempDir()
	h, file := startSaving(t, dir, twoServices, Options{Resync: 10 * time.Millisecond})
	// A directory where the state file goes makes every write fail.
	blocker := filepath.Join(dir, "running.yaml", "x")
	if err := os.MkdirAll(blocker, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := addBackend(h, "10.0.1.9"); err != nil {
		t.Fatalf("a change whose save failed: %v, want it in effect", err)
	}
	if !hasBackend(h.Config(), "10.0.1.9") {
		t.Fatal("the change is not in the running config")
	}
	testutil.Eventually(t, "the new backend programmed", func() bool { _, ok := h.weights("web")["10.0.1.9"]; return ok })
	if !h.hasEvent(EventStateNotSaved, "") {
		t.Fatal("no state_not_saved event")
	}
	// Once the file can be written again, the next resync saves it.
	if err := os.RemoveAll(filepath.Join(dir, "running.yaml")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the retried save", func() bool {
		start, cfg := reopen(t, file, dir)
		return start.Source == state.FromStateFile && hasBackend(cfg, "10.0.1.9")
	})
}

func TestTheAPIKeepsTheStateSection(t *testing.T) {
	dir := t.TempDir()
	h, _ := startSaving(t, dir, "state: {path: "+filepath.Join(dir, "elsewhere.yaml")+"}\n"+twoServices, Options{})
	next := h.Config()
	next.State = config.State{Path: "/etc/cron.d/sluice"}
	var errs config.Errors
	if _, err := h.Replace(false, "test", next); !errors.As(err, &errs) || errs[0].Path != "state" {
		t.Fatalf("a config with another state section: %v, want a state error", err)
	}
	next.State = config.State{}
	if _, err := h.Replace(false, "test", next); err != nil {
		t.Fatalf("a config without a state section: %v", err)
	}
	if got := h.Config().State.Path; !strings.HasSuffix(got, "elsewhere.yaml") {
		t.Fatalf("state.path is %q after a config without one, want the file's", got)
	}
}
