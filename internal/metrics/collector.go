package metrics

import (
	"context"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/engine"
)

// scrapeTimeout bounds the datapath read of one scrape.
const scrapeTimeout = 5 * time.Second

// backendStates are the values of engine.BackendView.State; each backend has one
// sluice_backend_state series per state, 1 for its current one.
var backendStates = []string{"active", "overloaded", "down", "draining", "drained", "idle", "standby", "sorry"}

// refusalReasons are the reason labels of sluice_service_refused_total, the config keys of the
// settings that refuse new flows, each with its count.
var refusalReasons = []struct {
	name  string
	count func(datapath.Refusals) uint64
}{
	{"source_list", func(r datapath.Refusals) uint64 { return r.SourceList }},
	{"connections_per_source", func(r datapath.Refusals) uint64 { return r.ConnectionsPerSource }},
	{"connections", func(r datapath.Refusals) uint64 { return r.Connections }},
	{"new_connections_per_source_per_second", func(r datapath.Refusals) uint64 { return r.NewConnectionsPerSourcePerSecond }},
	{"new_connections_per_second", func(r datapath.Refusals) uint64 { return r.NewConnectionsPerSecond }},
}

// unforwardedReasons are the reason labels of sluice_service_unforwarded_packets_total, each with
// its count.
var unforwardedReasons = []struct {
	name  string
	count func(datapath.Unforwarded) uint64
}{
	{"forwarding_disabled", func(u datapath.Unforwarded) uint64 { return u.ForwardingDisabled }},
	{"no_route", func(u datapath.Unforwarded) uint64 { return u.NoRoute }},
	{"no_neighbour", func(u datapath.Unforwarded) uint64 { return u.NoNeighbour }},
}

// family is a metric read from each item of type T (a service, a backend, a probe).
type family[T any] struct {
	desc  *prometheus.Desc
	typ   prometheus.ValueType
	value func(T) float64
	// counted tells whether an item has the value; nil: every item has it.
	counted func(T) bool
}

func newFamily[T any](name, help string, labels []string, typ prometheus.ValueType, value func(T) float64) family[T] {
	return family[T]{desc: prometheus.NewDesc("sluice_"+name, help, labels, nil), typ: typ, value: value}
}

// newCountFamily is a counter read from an optional count: an item whose datapath does not count
// it (nil) has no series rather than a 0 that reads as no traffic.
func newCountFamily[T any](name, help string, labels []string, count func(T) *uint64) family[T] {
	f := newFamily(name, help, labels, prometheus.CounterValue, func(item T) float64 { return float64(*count(item)) })
	f.counted = func(item T) bool { return count(item) != nil }
	return f
}

var (
	serviceLabels = []string{"service"}
	backendLabels = []string{"service", "backend"}
	probeLabels   = []string{"service", "target", "type"}
)

var applyFamilies = []family[engine.ApplyStats]{
	newFamily("datapath_applies_total", "Plans the datapath accepted.", nil, prometheus.CounterValue,
		func(s engine.ApplyStats) float64 { return float64(s.Applies) }),
	newFamily("datapath_apply_failures_total", "Plans that could not be built or applied.", nil, prometheus.CounterValue,
		func(s engine.ApplyStats) float64 { return float64(s.Failures) }),
	newFamily("datapath_last_apply_timestamp_seconds", "When the datapath last accepted a plan (0: never).", nil, prometheus.GaugeValue,
		func(s engine.ApplyStats) float64 { return unixSeconds(s.LastApplied) }),
}

var probeFamilies = []family[engine.HealthView]{
	newFamily("health_up", "Whether the health probe is up (1) or down (0), after rise/fall.", probeLabels, prometheus.GaugeValue,
		func(h engine.HealthView) float64 { return boolValue(h.State == "up") }),
	newFamily("health_check_latency_seconds", "Duration of the probe's last check.", probeLabels, prometheus.GaugeValue,
		func(h engine.HealthView) float64 { return h.Latency.Seconds() }),
	newFamily("health_checks_total", "Checks the probe has run.", probeLabels, prometheus.CounterValue,
		func(h engine.HealthView) float64 { return float64(h.Checks) }),
	newFamily("health_check_failures_total", "Checks of the probe that failed.", probeLabels, prometheus.CounterValue,
		func(h engine.HealthView) float64 { return float64(h.FailedChecks) }),
}

var serviceFamilies = []family[engine.ServiceView]{
	newFamily("service_programmed", "Whether the datapath holds the service (1) or not (0).", serviceLabels, prometheus.GaugeValue,
		func(s engine.ServiceView) float64 { return boolValue(s.Programmed) }),
	newFamily("service_slots", "Size of the programmed slot table (0: new flows meet the fallback).", serviceLabels, prometheus.GaugeValue,
		func(s engine.ServiceView) float64 { return float64(s.Slots) }),
}

var backendFamilies = []family[engine.BackendView]{
	newFamily("backend_flows_total", "New flows sent to the backend since it was programmed.", backendLabels, prometheus.CounterValue,
		func(b engine.BackendView) float64 { return float64(b.Flows) }),
	newFamily("backend_active_flows", "Flows the datapath tracks to the backend now.", backendLabels, prometheus.GaugeValue,
		func(b engine.BackendView) float64 { return float64(b.ActiveFlows) }),
	newCountFamily("backend_packets_total", "Packets forwarded from clients to the backend (no series where the datapath does not count them: nft.packet_counters).", backendLabels,
		func(b engine.BackendView) *uint64 { return b.Packets }),
	newCountFamily("backend_bytes_total", "Bytes forwarded from clients to the backend (no series where the datapath does not count them).", backendLabels,
		func(b engine.BackendView) *uint64 { return b.Bytes }),
	newFamily("backend_weight", "Configured weight of the backend.", backendLabels, prometheus.GaugeValue,
		func(b engine.BackendView) float64 { return float64(b.Weight) }),
	newFamily("backend_programmed_weight", "Weight the datapath holds for the backend, after health.", backendLabels, prometheus.GaugeValue,
		func(b engine.BackendView) float64 { return float64(b.ProgrammedWeight) }),
	newFamily("backend_share_ratio", "Fraction of the service's slot table held by the backend.", backendLabels, prometheus.GaugeValue,
		func(b engine.BackendView) float64 { return b.Share }),
	newFamily("backend_up", "Whether the backend's health is up or unchecked (1) or down (0).", backendLabels, prometheus.GaugeValue,
		func(b engine.BackendView) float64 { return boolValue(b.Health != "down") }),
}

// serviceTotals sums the counters of a service's backends; packets and bytes are nil when no
// backend's are counted.
type serviceTotals struct {
	flows, activeFlows uint64
	packets, bytes     *uint64
}

func totalsOf(s engine.ServiceView) serviceTotals {
	var t serviceTotals
	for _, b := range s.Backends {
		t.flows += b.Flows
		t.activeFlows += b.ActiveFlows
		t.packets = addCount(t.packets, b.Packets)
		t.bytes = addCount(t.bytes, b.Bytes)
	}
	return t
}

// addCount adds an optional count to an optional sum.
func addCount(sum, n *uint64) *uint64 {
	if n == nil {
		return sum
	}
	total := *n
	if sum != nil {
		total += *sum
	}
	return &total
}

var totalFamilies = []family[serviceTotals]{
	newFamily("service_flows_total", "New flows sent to the service's backends (the sum of sluice_backend_flows_total).", serviceLabels, prometheus.CounterValue,
		func(t serviceTotals) float64 { return float64(t.flows) }),
	newFamily("service_active_flows", "Flows the datapath tracks to the service's backends now.", serviceLabels, prometheus.GaugeValue,
		func(t serviceTotals) float64 { return float64(t.activeFlows) }),
	newCountFamily("service_packets_total", "Packets forwarded from clients to the service's backends (no series where the datapath does not count them).", serviceLabels,
		func(t serviceTotals) *uint64 { return t.packets }),
	newCountFamily("service_bytes_total", "Bytes forwarded from clients to the service's backends (no series where the datapath does not count them).", serviceLabels,
		func(t serviceTotals) *uint64 { return t.bytes }),
}

var (
	datapathUp = prometheus.NewDesc("sluice_datapath_up",
		"Whether this scrape could read the datapath (1) or not (0); service and backend metrics need it.", nil, nil)
	serviceInfo = prometheus.NewDesc("sluice_service_info", "Always 1; the labels describe the service.",
		[]string{"service", "vip", "ports", "protocol", "mode", "scheduler", "fallback"}, nil)
	backendState = prometheus.NewDesc("sluice_backend_state", "1 for the backend's current state, 0 for the others.",
		[]string{"service", "backend", "state"}, nil)
	serviceQuorum = prometheus.NewDesc("sluice_service_quorum",
		"Whether a service with a quorum holds it (1) or lost it (0); services without one have no series.", serviceLabels, nil)
	serviceBackends = prometheus.NewDesc("sluice_service_backends",
		"Backends and sorry servers of the service in each state; a state none is in has no series.", []string{"service", "state"}, nil)
	serviceRefused = prometheus.NewDesc("sluice_service_refused_total",
		"New flows the service's access lists and limits refused, by the setting that refused them; a reason that refused none has no series.",
		[]string{"service", "reason"}, nil)
	serviceUnforwarded = prometheus.NewDesc("sluice_service_unforwarded_packets_total",
		"Packets of the service (both ways) the datapath could not forward and dropped, by reason: forwarding_disabled (a forwarding sysctl is 0), no_route, no_neighbour; counted in no backend's packets. ebpf only; a reason that dropped none has no series.",
		[]string{"service", "reason"}, nil)
	serviceSecondChances = prometheus.NewDesc("sluice_service_second_chance_flows_total",
		"Mid-flow TCP segments without a flow that went to the backend their table slot had before the service's table last changed (second chance, within flow_timeout of the change). ebpf only; a service that gave none has no series.",
		[]string{"service"}, nil)
	serviceSYNCookies = prometheus.NewDesc("sluice_service_syn_cookies_total",
		"SYN cookies of a service with syn_protection: sent (answering a SYN), validated (opening a connection to a backend), rejected (a wrong cookie, the ACK dropped).",
		[]string{"service", "result"}, nil)
	perBackend = prometheus.NewDesc("sluice_metrics_per_backend",
		"Whether this scrape has the per-backend and per-probe series (1), or only the per-service ones (0: more backends than the limit, or turned off).", nil, nil)
)

// collector reads a Source at scrape time. Beyond maxBackends backends (or probes) it leaves out
// the series of each backend and probe, whose number grows with the config, and keeps the
// per-service ones.
type collector struct {
	src         Source
	log         *slog.Logger
	maxBackends int
	limited     atomic.Bool // whether the last scrape left the per-backend series out
}

// Describe sends every metric the collector can emit.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- datapathUp
	ch <- perBackend
	ch <- serviceInfo
	ch <- serviceBackends
	ch <- serviceQuorum
	ch <- serviceRefused
	ch <- serviceUnforwarded
	ch <- serviceSecondChances
	ch <- serviceSYNCookies
	ch <- backendState
	describe(ch, applyFamilies)
	describe(ch, probeFamilies)
	describe(ch, serviceFamilies)
	describe(ch, totalFamilies)
	describe(ch, backendFamilies)
}

// Collect reads the apply stats, the probes and, through the datapath, the services.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	emit(ch, applyFamilies, c.src.Stats())
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	services, err := c.src.Services(ctx)
	if err != nil {
		c.log.Warn("metrics: reading the datapath failed", "err", err)
	}
	ch <- gauge(datapathUp, boolValue(err == nil))
	probes := c.src.Health()
	each := c.perBackend(services, probes)
	ch <- gauge(perBackend, boolValue(each))
	if each {
		for _, h := range probes {
			for _, service := range h.Services {
				emit(ch, probeFamilies, h, service, h.Target.String(), string(h.Type))
			}
		}
	}
	for _, s := range services {
		ch <- gauge(serviceInfo, 1, s.Name, s.VIP.String(), s.Ports, string(s.Protocol), string(s.Mode), string(s.Scheduler), string(s.Fallback))
		emit(ch, serviceFamilies, s, s.Name)
		emit(ch, totalFamilies, totalsOf(s), s.Name)
		if s.Quorum != "" {
			ch <- gauge(serviceQuorum, boolValue(s.Quorum == engine.QuorumHeld), s.Name)
		}
		for _, reason := range refusalReasons {
			if n := reason.count(s.Refused); n > 0 {
				ch <- prometheus.MustNewConstMetric(serviceRefused, prometheus.CounterValue, float64(n), s.Name, reason.name)
			}
		}
		for _, reason := range unforwardedReasons {
			if n := reason.count(s.Unforwarded); n > 0 {
				ch <- prometheus.MustNewConstMetric(serviceUnforwarded, prometheus.CounterValue, float64(n), s.Name, reason.name)
			}
		}
		if s.SecondChances > 0 {
			ch <- prometheus.MustNewConstMetric(serviceSecondChances, prometheus.CounterValue, float64(s.SecondChances), s.Name)
		}
		if c := s.SYNCookies; c != (datapath.SYNCookies{}) {
			for result, n := range map[string]uint64{"sent": c.Sent, "validated": c.Validated, "rejected": c.Rejected} {
				ch <- prometheus.MustNewConstMetric(serviceSYNCookies, prometheus.CounterValue, float64(n), s.Name, result)
			}
		}
		inState := map[string]int{}
		for _, b := range s.Backends {
			inState[b.State]++
		}
		for state, n := range inState {
			ch <- gauge(serviceBackends, float64(n), s.Name, state)
		}
		if !each {
			continue
		}
		for _, b := range s.Backends {
			emit(ch, backendFamilies, b, s.Name, b.ID)
			states := backendStates
			if !slices.Contains(states, b.State) { // a state added to the engine and not yet here
				states = append(slices.Clip(states), b.State)
			}
			for _, state := range states {
				ch <- gauge(backendState, boolValue(state == b.State), s.Name, b.ID, state)
			}
		}
	}
}

// perBackend tells whether a scrape of services and probes gives each backend and probe series of
// its own, and logs when that changes.
func (c *collector) perBackend(services []engine.ServiceView, probes []engine.HealthView) bool {
	backends, pairs := 0, 0
	for _, s := range services {
		backends += len(s.Backends)
	}
	for _, h := range probes {
		pairs += len(h.Services)
	}
	n := max(backends, pairs) // the probes count when the datapath could not be read
	each := c.maxBackends > 0 && n <= c.maxBackends
	switch wasLimited := c.limited.Swap(!each); {
	case !each && !wasLimited && c.maxBackends > 0:
		c.log.Warn("metrics: more backends than the limit: the per-backend and per-probe series are left out, the per-service ones stay",
			"backends", n, "limit", c.maxBackends)
	case each && wasLimited:
		c.log.Info("metrics: the per-backend and per-probe series are back", "backends", n, "limit", c.maxBackends)
	}
	return each
}

func describe[T any](ch chan<- *prometheus.Desc, families []family[T]) {
	for _, f := range families {
		ch <- f.desc
	}
}

func emit[T any](ch chan<- prometheus.Metric, families []family[T], item T, labels ...string) {
	for _, f := range families {
		if f.counted == nil || f.counted(item) {
			ch <- prometheus.MustNewConstMetric(f.desc, f.typ, f.value(item), labels...)
		}
	}
}

func gauge(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func unixSeconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}
