package metrics

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicelb/sluice/internal/datapath"
)

var (
	conntrackEntries = prometheus.NewDesc("sluice_conntrack_entries",
		"Entries in the connection tracking table the datapath's flows live in.", nil, nil)
	conntrackMax = prometheus.NewDesc("sluice_conntrack_max",
		"The most entries that table holds; when it is full, new flows are dropped.", nil, nil)
)

// conntrackCollector reads the conntrack table's fill level at scrape time.
type conntrackCollector struct {
	r   datapath.ConntrackReader
	log *slog.Logger
}

func (c conntrackCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- conntrackEntries
	ch <- conntrackMax
}

// Collect sends both gauges, or neither when the table cannot be read (the reason is logged).
func (c conntrackCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	count, limit, err := c.r.Conntrack(ctx)
	if err != nil {
		c.log.Warn("metrics: reading the conntrack table failed", "err", err)
		return
	}
	ch <- gauge(conntrackEntries, float64(count))
	ch <- gauge(conntrackMax, float64(limit))
}
