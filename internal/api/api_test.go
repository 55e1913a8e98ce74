package api

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/bgp"
	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath/fake"
	"github.com/sluicelb/sluice/internal/engine"
	"github.com/sluicelb/sluice/internal/health"
	"github.com/sluicelb/sluice/internal/plan"
	"github.com/sluicelb/sluice/internal/replication"
	"github.com/sluicelb/sluice/internal/testutil"
)

// baseConfig is the config every test starts from; it is also the daemon's config file.
const baseConfig = `
services:
  - name: web
    vip: 192.0.2.10
    port: 80
    health_check: {type: tcp}
    backends:
      - {address: 10.0.0.1, port: 8080}
      - {address: 10.0.0.2, port: 8080}
      - {address: 10.0.0.3, port: 8080}
  - name: dns
    vip: 192.0.2.53
    port: 53
    protocol: udp
    backends:
      - {address: 10.0.1.1}
      - {address: 10.0.1.2}
`

// fixture is a running engine over the fake datapath, served by the API.
type fixture struct {
	engine     *engine.Engine
	dp         *fake.Datapath
	handler    http.Handler
	url        string       // an httptest server of handler
	http       *http.Client // to url, checking every exchange against openapi.yaml
	client     *Client      // to url, through the same checks
	configFile string
	stop       func() // stops the engine's Run, as the daemon's SIGTERM does, and waits for it
}

// quietSpeaker is a BGP speaker that announces nowhere: the API tests hold no BGP session.
type quietSpeaker struct{}

func (quietSpeaker) Configure(context.Context, bgp.Config) error   { return nil }
func (quietSpeaker) Set(context.Context, []bgp.Announcement) error { return nil }
func (quietSpeaker) Status(context.Context) (bgp.Status, error)    { return bgp.Status{}, nil }
func (quietSpeaker) Close(context.Context) error                   { return nil }

// quietReplicator takes any sync section and is always ready.
type quietReplicator struct{}

func (quietReplicator) Check(*config.Config) error { return nil }
func (quietReplicator) Set(*config.Config) error   { return nil }
func (quietReplicator) Ready() (bool, string)      { return true, "" }
func (quietReplicator) Status() replication.Status { return replication.Status{Ready: true} }

func newFixture(t testing.TB) *fixture {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(baseConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	dp := fake.New()
	e := engine.New(cfg, engine.Options{
		ConfigPath: path, Datapath: dp, Prober: &fakeProber{}, Log: slog.New(slog.DiscardHandler),
		MinApplyInterval: time.Millisecond, Resync: time.Hour, DrainPoll: 5 * time.Millisecond,
		NewAnnouncer: func(func(bgp.Event)) engine.Announcer { return quietSpeaker{} },
		Replicator:   quietReplicator{},
	})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = e.Run(ctx)
	}()
	stop := func() {
		cancel()
		<-stopped
	}
	t.Cleanup(stop)
	f := &fixture{engine: e, dp: dp, configFile: path, stop: stop,
		handler: NewHandler(e, Info{Version: "test", Datapath: "fake", ConfigFile: path, Started: time.Now()})}
	srv := httptest.NewServer(f.handler)
	t.Cleanup(srv.Close)
	f.url = srv.URL
	f.http = &http.Client{Transport: contractChecker(t, http.DefaultTransport)}
	f.client = NewTCPClient(srv.URL, "")
	f.client.http = f.http
	f.settle(t)
	return f
}

// settle waits until the datapath holds the plan of the running config.
func (f *fixture) settle(t testing.TB) {
	t.Helper()
	testutil.Eventually(t, "the datapath holds the running config", func() bool {
		want, err := plan.Build(f.engine.Config(), nil)
		return err == nil && reflect.DeepEqual(f.dp.Plan(), want)
	})
}

// do sends a raw request through the contract checks and returns the status and body.
func (f *fixture) do(t testing.TB, method, path, contentType string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, f.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := f.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, data
}

// fakeProber reports every probe the engine asks for as up.
type fakeProber struct {
	mu     sync.Mutex
	probes []health.Probe
}

var _ engine.Prober = (*fakeProber)(nil)

func (p *fakeProber) Set(probes []health.Probe) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.probes = probes
}

func (p *fakeProber) Status(string) (health.Status, bool) { return health.Status{}, false }

func (p *fakeProber) All() []health.Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []health.Status
	for _, probe := range p.probes {
		out = append(out, health.Status{Key: probe.Key(), Type: probe.Check.Type, Target: probe.Target, Up: true, Checks: 1, Successes: 1})
	}
	return out
}
