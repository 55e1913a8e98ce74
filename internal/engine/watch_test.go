package engine

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath/nft"
	"github.com/sluicelb/sluice/internal/health"
	"github.com/sluicelb/sluice/internal/netnstest"
	"github.com/sluicelb/sluice/internal/testutil"
)

// TestTableDeletedByOthersIsRepairedAtOnce: with the periodic resync an hour away, a table of the
// nft datapath deleted by someone else is back within seconds, and the repair is an event.
func TestTableDeletedByOthersIsRepairedAtOnce(t *testing.T) {
	if os.Geteuid() != 0 {
		testutil.Missing(t, "needs root: programs nftables in a network namespace")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		testutil.Missing(t, "needs nft: %v", err)
	}
	ns := netnstest.EnterNew(t)
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil { // nat needs it
		t.Fatal(err)
	}
	cfg, err := config.Parse("test.yaml", []byte(`
datapath: nft
services:
  - name: web
    vip: 10.91.9.100
    port: 80
    backends: [{address: 10.91.2.11}, {address: 10.91.2.12}]
`))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	dp, err := nft.New(log)
	if err != nil {
		t.Fatal(err)
	}
	e := New(cfg, Options{Datapath: dp, Log: log, Prober: &fakeProber{states: map[string]health.Status{}}, Resync: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := netns.Set(ns); err != nil {
			t.Error(err)
			return
		}
		_ = e.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	testutil.Eventually(t, "first apply", func() bool { return e.Stats().Applies == 1 })

	nftCommand(t, "delete", "table", "inet", "sluice")
	testutil.Eventually(t, "the table back", func() bool { return exec.Command("nft", "list", "table", "inet", "sluice").Run() == nil })
	testutil.Eventually(t, "the repair reported", func() bool {
		for _, ev := range e.Events(0) {
			if ev.Type == EventDatapathRepaired && strings.Contains(ev.Message, "table inet sluice deleted") {
				return true
			}
		}
		return false
	})
	if n := e.Stats().Applies; n != 2 {
		t.Errorf("%d applies, want 2: the first and the repair", n)
	}
}

func nftCommand(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("nft", args...).CombinedOutput(); err != nil {
		t.Fatalf("nft %s: %v: %s", strings.Join(args, " "), err, out)
	}
}
