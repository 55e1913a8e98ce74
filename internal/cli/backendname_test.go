package cli

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/api"
	"github.com/sluicelb/sluice/internal/bgp"
	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath/fake"
	"github.com/sluicelb/sluice/internal/engine"
)

// TestPortlessBackendsAreNamedByAddress: a backend without a port (dsr's) is named by its address
// alone in what adding it answers and records ("10.0.0.3", never "10.0.0.3:0").
func TestPortlessBackendsAreNamedByAddress(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	text := "services:\n  - name: web\n    vip: 192.0.2.10\n    port: 80\n    mode: dsr\n    backends: [{address: 10.0.0.1}]\n"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	e := engine.New(cfg, engine.Options{ConfigPath: path, Datapath: fake.New(), Log: slog.New(slog.DiscardHandler),
		MinApplyInterval: time.Millisecond, Resync: time.Hour,
		NewAnnouncer: func(func(bgp.Event)) engine.Announcer { return nil }})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = e.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-stopped
	})
	srv := httptest.NewServer(api.NewHandler(e, api.Info{ConfigFile: path}))
	t.Cleanup(srv.Close)

	var said strings.Builder
	for _, args := range [][]string{{"backend", "add", "web", "10.0.0.3"}, {"backend", "add", "web", "10.0.0.3"}, {"events"}} {
		out, err := sluiceCLI(t, "", append([]string{"--api", srv.URL}, args...)...)
		said.WriteString(out)
		if err != nil {
			said.WriteString(err.Error() + "\n")
		}
	}
	for _, want := range []string{"api: add backend 10.0.0.3 to web", "backend 10.0.0.3 of service web: already exists"} {
		if !strings.Contains(said.String(), want) {
			t.Errorf("no %q in:\n%s", want, said.String())
		}
	}
	if strings.Contains(said.String(), "10.0.0.3:0") {
		t.Errorf("a backend without a port named with port 0:\n%s", said.String())
	}
}
