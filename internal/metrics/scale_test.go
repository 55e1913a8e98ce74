package metrics

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath/fake"
	"github.com/sluicelb/sluice/internal/engine"
	"github.com/sluicelb/sluice/internal/testutil"
)

// startScale runs an engine over the fake datapath with cfg until it has applied it, watched by m.
func startScale(tb testing.TB, cfg *config.Config, m *Metrics, opts WatchOptions) {
	tb.Helper()
	dp := fake.New()
	e := engine.New(cfg, engine.Options{Datapath: dp, Log: slog.New(slog.DiscardHandler), MinApplyInterval: time.Millisecond, Resync: time.Hour, Prober: &prober{}})
	m.Watch(e, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.Run(ctx) }()
	tb.Cleanup(func() { cancel(); <-done })
	for deadline := time.Now().Add(time.Minute); dp.Plan() == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatal("the engine applied no plan")
		}
	}
}

// scrapeSize fetches the exposition once and returns its size and series (sample lines).
func scrapeSize(tb testing.TB, url string) (bytes, series int) {
	resp, err := http.Get(url)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		tb.Fatalf("scrape: status %d, %v", resp.StatusCode, err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			series++
		}
	}
	return len(body), series
}

// BenchmarkScrape10kServices scrapes 10,000 services × 10 backends on the fake datapath, with
// every backend's series and with the default limit, which leaves them out at that size.
func BenchmarkScrape10kServices(b *testing.B) {
	cfg := testutil.Config(b, testutil.ManyServices(10_000, 10))
	for _, bc := range []struct {
		name        string
		maxBackends int
	}{{"per-backend", 100_000}, {"default", DefaultMaxBackends}} {
		b.Run(bc.name, func(b *testing.B) {
			m := New("bench", slog.New(slog.DiscardHandler))
			startScale(b, cfg, m, WatchOptions{MaxBackends: bc.maxBackends})
			srv := httptest.NewServer(m.Handler())
			defer srv.Close()
			var bytes, series int
			for b.Loop() {
				bytes, series = scrapeSize(b, srv.URL)
			}
			b.ReportMetric(float64(bytes)/1e6, "MB/scrape")
			b.ReportMetric(float64(series), "series/scrape")
		})
	}
}
