package metrics

import (
	"context"
	"log/slog"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicelb/sluice/internal/engine"
)

// nodeStates are the values of engine.NodeView.State.
var nodeStates = []string{engine.NodeActive, engine.NodeDraining, engine.NodeDrained}

var peerLabels = []string{"peer", "peer_asn"}

var (
	nodeState = prometheus.NewDesc("sluice_node_state",
		"1 for the node's drain state (active, draining, drained), 0 for the others.", []string{"state"}, nil)
	bgpEnabled = prometheus.NewDesc("sluice_bgp_enabled", "Whether the config has a bgp section (1) or not (0).", nil, nil)
	peerUp     = prometheus.NewDesc("sluice_bgp_peer_up",
		"Whether the BGP session with the peer is established (1) or not (0).", peerLabels, nil)
	peerEstablished = prometheus.NewDesc("sluice_bgp_peer_established_timestamp_seconds",
		"When the session with the peer was last established (0: not established).", peerLabels, nil)
	peerSent = prometheus.NewDesc("sluice_bgp_peer_prefixes_sent",
		"Prefixes the node announces to the peer now.", peerLabels, nil)
	peerFlaps = prometheus.NewDesc("sluice_bgp_peer_flaps_total",
		"Times the session with the peer went down after it was established.", peerLabels, nil)
	vipAnnounced = prometheus.NewDesc("sluice_bgp_vip_announced",
		"Whether the node announces the VIP (1) or withdrew it (0); sluice bgp tells why.", []string{"vip"}, nil)
	announced = prometheus.NewDesc("sluice_bgp_announced_prefixes",
		"VIPs the node announces now.", nil, nil)
)

// bgpCollector reads the node's BGP state and drain state at scrape time.
type bgpCollector struct {
	src Source
	log *slog.Logger
}

// Describe sends every metric the collector can emit.
func (c bgpCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{nodeState, bgpEnabled, peerUp, peerEstablished, peerSent, peerFlaps, vipAnnounced, announced} {
		ch <- d
	}
}

// Collect reads the engine's BGP view.
func (c bgpCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	view, err := c.src.BGP(ctx)
	if err != nil {
		c.log.Warn("metrics: reading the bgp speaker failed", "err", err)
		return
	}
	for _, s := range nodeStates {
		ch <- gauge(nodeState, boolValue(view.Node.State == s), s)
	}
	ch <- gauge(bgpEnabled, boolValue(view.Enabled))
	if !view.Enabled {
		return
	}
	for _, p := range view.Peers {
		labels := []string{p.Address, strconv.FormatUint(uint64(p.ASN), 10)}
		up := p.State == "established"
		ch <- gauge(peerUp, boolValue(up), labels...)
		since := 0.0
		if up {
			since = unixSeconds(p.Since)
		}
		ch <- gauge(peerEstablished, since, labels...)
		ch <- gauge(peerSent, float64(p.PrefixesSent), labels...)
		ch <- prometheus.MustNewConstMetric(peerFlaps, prometheus.CounterValue, float64(p.Flaps), labels...)
	}
	n := 0
	for _, v := range view.VIPs {
		ch <- gauge(vipAnnounced, boolValue(v.Announced), v.VIP)
		if v.Announced {
			n++
		}
	}
	ch <- gauge(announced, float64(n))
}
