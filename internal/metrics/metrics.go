// Package metrics exposes Sluice's Prometheus metrics: the services, backends and health probes
// read from the engine (and through it the datapath counters) at scrape time, the conntrack table's
// fill level, the datapath apply durations, the Go runtime and the process.
package metrics

import (
	"context"
	"log/slog"
	"net/http"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/engine"
	"github.com/sluicelb/sluice/internal/replication"
)

// Source is what a scrape reads; *engine.Engine is one.
type Source interface {
	Services(ctx context.Context) ([]engine.ServiceView, error)
	Health() []engine.HealthView
	Stats() engine.ApplyStats
	BGP(ctx context.Context) (engine.BGPView, error)
	Sync() replication.Status
}

// Metrics is Sluice's registry, with the apply histogram the engine feeds.
type Metrics struct {
	reg   *prometheus.Registry
	log   *slog.Logger
	apply *prometheus.HistogramVec
}

// New returns the metrics of a daemon of the given version, without the engine's yet (see Watch);
// log (nil: slog.Default) gets the scrape errors.
func New(version string, log *slog.Logger) *Metrics {
	if log == nil {
		log = slog.Default()
	}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		log: log,
		apply: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_datapath_apply_duration_seconds",
			Help:    "Time taken by datapath applies, by result (ok or error).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14), // 0.5ms to 4s
		}, []string{"result"}),
	}
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "sluice_build_info",
		Help:        "Always 1; the labels are the running Sluice's version (git describe) and Go's.",
		ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version()},
	})
	build.Set(1)
	for _, result := range []string{"ok", "error"} {
		m.apply.WithLabelValues(result) // both series exist from the start
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		build, m.apply,
	)
	return m
}

// ObserveApply records one datapath apply; it is an engine.Options.OnApply.
func (m *Metrics) ObserveApply(took time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.apply.WithLabelValues(result).Observe(took.Seconds())
}

// DefaultMaxBackends is the default of WatchOptions.MaxBackends: 10,000 backends make about 150,000
// per-backend series, some 10 MB per scrape.
const DefaultMaxBackends = 10_000

// WatchOptions bound and extend what Watch exports.
type WatchOptions struct {
	// MaxBackends is the most backends (and health probes) a scrape gives series of their own;
	// with more, it has only the per-service aggregates, and sluice_metrics_per_backend is 0.
	// 0 turns the per-backend series off.
	MaxBackends int
	// Conntrack, when set, feeds sluice_conntrack_entries and sluice_conntrack_max.
	Conntrack datapath.ConntrackReader
}

// Watch adds the metrics read from src (and opts.Conntrack) at every scrape; call it once.
func (m *Metrics) Watch(src Source, opts WatchOptions) {
	m.reg.MustRegister(&collector{src: src, log: m.log, maxBackends: opts.MaxBackends}, bgpCollector{src: src, log: m.log}, syncCollector{src: src})
	if opts.Conntrack != nil {
		m.reg.MustRegister(conntrackCollector{r: opts.Conntrack, log: m.log})
	}
}

// Handler serves the metrics to Prometheus; a metric that fails is logged and left out.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(m.log.Handler(), slog.LevelError),
		ErrorHandling: promhttp.ContinueOnError,
		Registry:      m.reg,
	})
}
