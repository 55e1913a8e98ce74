package metrics

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicelb/sluice/internal/bgp"
	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/datapath/fake"
	"github.com/sluicelb/sluice/internal/engine"
	"github.com/sluicelb/sluice/internal/health"
	sluicetest "github.com/sluicelb/sluice/internal/testutil"
)

const testConfig = `
bgp:
  asn: 65100
  router_id: 10.9.0.11
  peers: [{address: 10.9.0.1, asn: 65000}]
services:
  - name: web
    vip: 10.0.0.100
    port: 80
    health_check: {type: tcp}
    backends:
      - address: 10.0.0.1
      - {address: 10.0.0.2, port: 8080, weight: 2}
  - name: dns
    vip: 10.0.0.100
    port: 53
    protocol: udp
    scheduler: wrr
    quorum: 1
    backends:
      - address: 10.0.0.3
`

// prober reports every probe up with three checks, except the targets in down.
type prober struct {
	down   map[netip.AddrPort]bool
	mu     sync.Mutex
	probes []health.Probe
}

func (p *prober) Set(probes []health.Probe) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.probes = probes
}

func (p *prober) Status(key string) (health.Status, bool) {
	for _, st := range p.All() {
		if st.Key == key {
			return st, true
		}
	}
	return health.Status{}, false
}

func (p *prober) All() []health.Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []health.Status
	for _, pr := range p.probes {
		out = append(out, health.Status{
			Key: pr.Key(), Type: pr.Check.Type, Target: pr.Target, Up: !p.down[pr.Target], Checks: 3,
			FailedChecks: map[bool]uint64{true: 3}[p.down[pr.Target]],
			Last:         health.Result{Latency: 1500 * time.Microsecond},
		})
	}
	return out
}

// counting adds packet, byte and flow counters and web's refusals to the fake's status, and fails
// it when broken; uncounted leaves packets and bytes out, as nft with nft.packet_counters false.
type counting struct {
	*fake.Datapath
	broken, uncounted atomic.Bool
}

func (d *counting) Status(ctx context.Context) ([]datapath.ServiceStatus, error) {
	if d.broken.Load() {
		return nil, errors.New("netlink: operation not permitted")
	}
	status, err := d.Datapath.Status(ctx)
	for i := range status {
		if status[i].Name == "web" {
			status[i].Refused = datapath.Refusals{SourceList: 4, NewConnectionsPerSecond: 2}
			status[i].SYNCookies = datapath.SYNCookies{Sent: 9, Validated: 7}
			status[i].Unforwarded = datapath.Unforwarded{ForwardingDisabled: 5, NoNeighbour: 1}
		}
		for j := range status[i].Backends {
			b := &status[i].Backends[j]
			packets, bytes := uint64(11), uint64(13)
			b.Flows, b.Packets, b.Bytes = 7, &packets, &bytes
			if d.uncounted.Load() {
				b.Packets, b.Bytes = nil, nil
			}
		}
	}
	return status, err
}

// start runs an engine over the counting fake datapath, with 10.0.0.2:8080 down, until it has
// applied its first plan; the returned Metrics watch it with the default options.
func start(t *testing.T) (*Metrics, *engine.Engine, *counting) {
	t.Helper()
	return startWith(t, WatchOptions{MaxBackends: DefaultMaxBackends}, slog.New(slog.DiscardHandler))
}

// startWith is start with opts, logging to log.
func startWith(t *testing.T, opts WatchOptions, log *slog.Logger) (*Metrics, *engine.Engine, *counting) {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	m := New("test", log)
	dp := &counting{Datapath: fake.New()}
	e := engine.New(cfg, engine.Options{
		Datapath: dp, Log: log, MinApplyInterval: time.Millisecond, OnApply: m.ObserveApply,
		Prober:       &prober{down: map[netip.AddrPort]bool{netip.MustParseAddrPort("10.0.0.2:8080"): true}},
		NewAnnouncer: func(func(bgp.Event)) engine.Announcer { return &speaker{} },
	})
	m.Watch(e, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := e.Run(ctx); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	for deadline := time.Now().Add(10 * time.Second); dp.Plan() == nil; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the engine applied no plan")
		}
	}
	return m, e, dp
}

// scrape fetches the exposition through the handler and returns its lines.
func scrape(t *testing.T, m *Metrics) []string {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: status %d, %v", resp.StatusCode, err)
	}
	return strings.Split(string(body), "\n")
}

// wantLines fails the test for every line of want missing from got.
func wantLines(t *testing.T, got []string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("missing %s", w)
		}
	}
}

func TestScrape(t *testing.T) {
	m, _, dp := start(t)
	dp.SetActiveFlows("web", "10.0.0.1", 5)
	m.ObserveApply(time.Millisecond, errors.New("nft: syntax error"))

	got := scrape(t, m)
	wantLines(t, got,
		`sluice_build_info{goversion="`+runtime.Version()+`",version="test"} 1`,
		`sluice_datapath_up 1`,
		`sluice_datapath_apply_failures_total 0`,
		`sluice_datapath_apply_duration_seconds_count{result="error"} 1`,
		`sluice_service_info{fallback="drop",mode="nat",ports="80",protocol="tcp",scheduler="maglev",service="web",vip="10.0.0.100"} 1`,
		`sluice_service_info{fallback="drop",mode="nat",ports="53",protocol="udp",scheduler="wrr",service="dns",vip="10.0.0.100"} 1`,
		`sluice_service_programmed{service="web"} 1`,
		`sluice_metrics_per_backend 1`,
		`sluice_service_flows_total{service="web"} 14`,
		`sluice_service_active_flows{service="web"} 5`,
		`sluice_service_packets_total{service="dns"} 11`,
		`sluice_service_bytes_total{service="web"} 26`,
		`sluice_service_backends{service="web",state="active"} 1`,
		`sluice_service_backends{service="web",state="down"} 1`,
		`sluice_service_backends{service="dns",state="active"} 1`,
		`sluice_service_quorum{service="dns"} 1`,
		`sluice_service_refused_total{reason="source_list",service="web"} 4`,
		`sluice_service_refused_total{reason="new_connections_per_second",service="web"} 2`,
		`sluice_service_unforwarded_packets_total{reason="forwarding_disabled",service="web"} 5`,
		`sluice_service_unforwarded_packets_total{reason="no_neighbour",service="web"} 1`,
		`sluice_service_syn_cookies_total{result="sent",service="web"} 9`,
		`sluice_service_syn_cookies_total{result="validated",service="web"} 7`,
		`sluice_service_syn_cookies_total{result="rejected",service="web"} 0`,
		`sluice_backend_active_flows{backend="10.0.0.1",service="web"} 5`,
		`sluice_backend_active_flows{backend="10.0.0.2:8080",service="web"} 0`,
		`sluice_backend_flows_total{backend="10.0.0.1",service="web"} 7`,
		`sluice_backend_packets_total{backend="10.0.0.1",service="web"} 11`,
		`sluice_backend_bytes_total{backend="10.0.0.1",service="web"} 13`,
		`sluice_backend_weight{backend="10.0.0.2:8080",service="web"} 2`,
		`sluice_backend_programmed_weight{backend="10.0.0.2:8080",service="web"} 0`,
		`sluice_backend_share_ratio{backend="10.0.0.1",service="web"} 1`,
		`sluice_backend_up{backend="10.0.0.1",service="web"} 1`,
		`sluice_backend_up{backend="10.0.0.2:8080",service="web"} 0`,
		`sluice_backend_up{backend="10.0.0.3",service="dns"} 1`,
		`sluice_backend_state{backend="10.0.0.1",service="web",state="active"} 1`,
		`sluice_backend_state{backend="10.0.0.2:8080",service="web",state="active"} 0`,
		`sluice_backend_state{backend="10.0.0.2:8080",service="web",state="down"} 1`,
		`sluice_health_up{service="web",target="10.0.0.1:80",type="tcp"} 1`,
		`sluice_health_up{service="web",target="10.0.0.2:8080",type="tcp"} 0`,
		`sluice_health_check_latency_seconds{service="web",target="10.0.0.1:80",type="tcp"} 0.0015`,
		`sluice_health_checks_total{service="web",target="10.0.0.2:8080",type="tcp"} 3`,
		`sluice_health_check_failures_total{service="web",target="10.0.0.2:8080",type="tcp"} 3`,
	)
	if refused := slices.DeleteFunc(slices.Clone(got), func(line string) bool {
		return !strings.HasPrefix(line, "sluice_service_refused_total{")
	}); len(refused) != 2 {
		t.Errorf("refusal series %q, want only the non-zero ones", refused)
	}
	if unforwarded := slices.DeleteFunc(slices.Clone(got), func(line string) bool {
		return !strings.HasPrefix(line, "sluice_service_unforwarded_packets_total{")
	}); len(unforwarded) != 2 {
		t.Errorf("unforwarded series %q, want only the non-zero ones", unforwarded)
	}
	for _, prefix := range []string{
		`sluice_datapath_applies_total `, `sluice_datapath_apply_duration_seconds_count{result="ok"} `,
		`go_goroutines `, `process_cpu_seconds_total `,
	} {
		if !slices.ContainsFunc(got, func(line string) bool { return strings.HasPrefix(line, prefix) }) {
			t.Errorf("missing %s", prefix)
		}
	}
	if problems, err := testutil.GatherAndLint(m.reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// TestUncountedPackets: where the datapath does not count packets and bytes, their series are
// absent rather than 0, which would read as no traffic; the flow series stay.
func TestUncountedPackets(t *testing.T) {
	m, _, dp := start(t)
	dp.uncounted.Store(true)
	got := scrape(t, m)
	wantLines(t, got,
		`sluice_service_flows_total{service="web"} 14`,
		`sluice_backend_flows_total{backend="10.0.0.1",service="web"} 7`,
	)
	for _, prefix := range []string{"sluice_service_packets_total", "sluice_service_bytes_total", "sluice_backend_packets_total", "sluice_backend_bytes_total"} {
		if slices.ContainsFunc(got, func(line string) bool { return strings.HasPrefix(line, prefix) }) {
			t.Errorf("%s has series for uncounted packets", prefix)
		}
	}
}

func TestCollectorLint(t *testing.T) {
	_, e, _ := start(t)
	c := &collector{src: e, log: slog.New(slog.DiscardHandler), maxBackends: DefaultMaxBackends}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

func TestDatapathDown(t *testing.T) {
	m, _, dp := start(t)
	dp.broken.Store(true)
	got := scrape(t, m)
	wantLines(t, got,
		`sluice_datapath_up 0`,
		`sluice_health_up{service="web",target="10.0.0.2:8080",type="tcp"} 0`,
		`sluice_datapath_apply_failures_total 0`,
	)
	if slices.ContainsFunc(got, func(line string) bool { return strings.HasPrefix(line, "sluice_backend_") }) {
		t.Error("backend metrics without a datapath to read them from")
	}
}

func TestBackendSeriesLimit(t *testing.T) {
	for _, tc := range []struct {
		name        string
		maxBackends int
		warning     bool
	}{{"above the limit", 2, true}, {"turned off", 0, false}} {
		t.Run(tc.name, func(t *testing.T) {
			var logged sluicetest.LogBuffer
			m, _, _ := startWith(t, WatchOptions{MaxBackends: tc.maxBackends}, slog.New(slog.NewTextHandler(&logged, nil)))
			scrape(t, m)
			got := scrape(t, m)
			wantLines(t, got,
				`sluice_metrics_per_backend 0`,
				`sluice_service_programmed{service="web"} 1`,
				`sluice_service_flows_total{service="web"} 14`,
				`sluice_service_backends{service="web",state="down"} 1`,
			)
			for _, prefix := range []string{"sluice_backend_", "sluice_health_"} {
				if slices.ContainsFunc(got, func(line string) bool { return strings.HasPrefix(line, prefix) }) {
					t.Errorf("%s series above the limit", prefix)
				}
			}
			if n := strings.Count(logged.String(), "series are left out"); n != boolCount(tc.warning) {
				t.Errorf("%d warnings in two scrapes, want %d:\n%s", n, boolCount(tc.warning), logged.String())
			}
			if problems, err := testutil.GatherAndLint(m.reg); err != nil || len(problems) > 0 {
				t.Errorf("lint: %v %v", problems, err)
			}
		})
	}
}

func boolCount(b bool) int {
	if b {
		return 1
	}
	return 0
}

// conntrack is a datapath.ConntrackReader with set values.
type conntrack struct {
	count, max uint64
	err        error
}

func (c conntrack) Conntrack(context.Context) (uint64, uint64, error) { return c.count, c.max, c.err }

func TestConntrack(t *testing.T) {
	m, _, _ := startWith(t, WatchOptions{MaxBackends: DefaultMaxBackends, Conntrack: conntrack{count: 1234, max: 262144}}, slog.New(slog.DiscardHandler))
	wantLines(t, scrape(t, m), `sluice_conntrack_entries 1234`, `sluice_conntrack_max 262144`)
	if problems, err := testutil.GatherAndLint(m.reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}

	var logged sluicetest.LogBuffer
	m, _, _ = startWith(t, WatchOptions{MaxBackends: DefaultMaxBackends, Conntrack: conntrack{err: errors.New("netlink: permission denied")}}, slog.New(slog.NewTextHandler(&logged, nil)))
	got := scrape(t, m)
	if slices.ContainsFunc(got, func(line string) bool { return strings.HasPrefix(line, "sluice_conntrack_") }) {
		t.Error("conntrack series from a table that could not be read")
	}
	wantLines(t, got, `sluice_datapath_up 1`)
	if !strings.Contains(logged.String(), "permission denied") {
		t.Errorf("the conntrack error was not logged: %s", logged.String())
	}
}

func TestProbes(t *testing.T) {
	_, e, dp := start(t)
	get := func(h http.Handler) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := get(Healthz()); code != http.StatusOK || body != "ok\n" {
		t.Errorf("healthz: %d %q", code, body)
	}
	if code, body := get(Readyz(e)); code != http.StatusOK || body != "ready\n" {
		t.Errorf("readyz after the first apply: %d %q", code, body)
	}
	dp.FailWith(errors.New("nft: no such table"))
	t.Cleanup(func() { dp.FailWith(nil) })
	// A weight change makes the engine apply again; the apply fails, whatever Update reports.
	_, _ = e.Update(false, "test", func(cfg *config.Config) error {
		weight := 5
		cfg.Services[1].Backends[0].Weight = &weight
		return nil
	})
	for deadline := time.Now().Add(10 * time.Second); e.Stats().LastError == ""; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the failing apply never ran")
		}
	}
	if code, body := get(Readyz(e)); code != http.StatusServiceUnavailable || !strings.Contains(body, "nft: no such table") {
		t.Errorf("readyz after a failed apply: %d %q", code, body)
	}
}
