package engine

import (
	"context"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/bgp"
	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/datapath/fake"
	"github.com/sluicelb/sluice/internal/health"
	"github.com/sluicelb/sluice/internal/plan"
	"github.com/sluicelb/sluice/internal/replication"
	"github.com/sluicelb/sluice/internal/testutil"
)

const nodeConfig = `
services:
  - name: web
    vip: 10.0.0.1
    port: 80
    backends: [{address: 10.0.1.1}]
`

// TestUndrainTellsWhyTheNodeIsReady: the answer to an undrain carries the readiness and its
// reason, as node status does, not an empty "not ready: ".
func TestUndrainTellsWhyTheNodeIsReady(t *testing.T) {
	h := start(t, nodeConfig, Options{})
	if _, err := h.DrainNode(context.Background(), time.Minute); err != nil {
		t.Fatal(err)
	}
	n := h.UndrainNode()
	if n.State != NodeActive || !n.Ready || !strings.Contains(n.Why, "1 of 1 vips can take new flows") {
		t.Fatalf("undrain answered %+v, want active and ready with the reason", n)
	}
}

// forwardingDatapath is a fake datapath whose namespace forwards IPv4 or not.
type forwardingDatapath struct {
	*fake.Datapath
	off atomic.Bool
}

func (d *forwardingDatapath) CheckForwarding(p *plan.Plan) error {
	if !d.off.Load() || len(p.Services) == 0 {
		return nil
	}
	return &datapath.ForwardingError{Off: []datapath.ForwardingNeed{{Sysctl: datapath.IPv4Forwarding, Service: p.Services[0].Name, Mode: config.ModeNAT}}}
}

// TestNodeIsNotReadyWhenForwardingGoesOff: forwarding turned off after the apply makes the node
// not ready at once, naming the sysctl, and ready again once it is back on.
func TestNodeIsNotReadyWhenForwardingGoesOff(t *testing.T) {
	dp := &forwardingDatapath{Datapath: fake.New()}
	e := runEngine(t, nodeConfig, Options{Datapath: dp})
	testutil.Eventually(t, "first apply", func() bool { return dp.Applies() == 1 })
	if n := e.Node(); !n.Ready {
		t.Fatalf("forwarding on: %+v, want ready", n)
	}
	dp.off.Store(true)
	n := e.Node()
	if n.Ready || !strings.Contains(n.Why, "net.ipv4.ip_forward=0") || !strings.Contains(n.Why, "sysctl -w net.ipv4.ip_forward=1") {
		t.Fatalf("forwarding off: %+v, want not ready naming net.ipv4.ip_forward and the fix", n)
	}
	dp.off.Store(false)
	if n := e.Node(); !n.Ready {
		t.Fatalf("forwarding back on: %+v, want ready", n)
	}
}

// TestVIPsAreWithdrawnWhenForwardingGoesOff: a VIP whose services need the forwarding turned off
// after the apply is withdrawn from BGP at the next announce, not at the next resync, naming the
// sysctl; a VIP of the other family stays announced; both return once forwarding is back.
func TestVIPsAreWithdrawnWhenForwardingGoesOff(t *testing.T) {
	dp := &forwardingDatapath{Datapath: fake.New()}
	speaker := &fakeSpeaker{}
	opts := announcingTo(speaker)
	opts.Datapath = dp
	e := runEngine(t, `
bgp:
  asn: 65100
  peers: [{address: 10.9.0.1, asn: 65000}]
services:
  - {name: dns, vip: 10.0.0.2, port: 53, protocol: udp, backends: [{address: 10.0.1.1}]}
  - {name: dns6, vip: "fd00::2", port: 53, protocol: udp, backends: [{address: "fd00:1::1"}]}
`, opts)
	announces(t, speaker, "10.0.0.2/32", "fd00::2/128")
	dp.off.Store(true) // IPv4 forwarding off
	announces(t, speaker, "fd00::2/128")
	view, _ := e.BGP(context.Background())
	if got := viewOf(view, "10.0.0.2"); got.Announced || !strings.Contains(got.Reason, "net.ipv4.ip_forward=0") {
		t.Fatalf("10.0.0.2 with IPv4 forwarding off: %+v, want withdrawn naming the sysctl", got)
	}
	dp.off.Store(false)
	announces(t, speaker, "10.0.0.2/32", "fd00::2/128")
}

// waitingReplicator is a Replicator that is not ready until told.
type waitingReplicator struct{ ready atomic.Bool }

func (*waitingReplicator) Check(*config.Config) error { return nil }
func (*waitingReplicator) Set(*config.Config) error   { return nil }
func (r *waitingReplicator) Ready() (bool, string) {
	if r.ready.Load() {
		return true, "initial sync done"
	}
	return false, "waiting for the initial sync of the flow tables from a peer (at most 10s)"
}
func (r *waitingReplicator) Status() replication.Status {
	ready, why := r.Ready()
	return replication.Status{Enabled: true, Ready: ready, Why: why}
}

// TestVIPsWaitForTheInitialSync: a node whose replication has not received its peers' flows yet
// announces nothing and is not ready, naming what it waits for; once the sync is in, it announces.
func TestVIPsWaitForTheInitialSync(t *testing.T) {
	rep := &waitingReplicator{}
	speaker := &fakeSpeaker{}
	opts := announcingTo(speaker)
	opts.Datapath, opts.Replicator = fake.New(), rep
	e := runEngine(t, `
bgp:
  asn: 65100
  peers: [{address: 10.9.0.1, asn: 65000}]
services:
  - {name: dns, vip: 10.0.0.2, port: 53, protocol: udp, backends: [{address: 10.0.1.1}]}
`, opts)
	ctx := t.Context()
	testutil.Eventually(t, "the first announce", func() bool { view, _ := e.BGP(ctx); return len(view.VIPs) == 1 })
	view, _ := e.BGP(ctx)
	if got := viewOf(view, "10.0.0.2"); got.Announced || !strings.Contains(got.Reason, "waiting for the initial sync") {
		t.Fatalf("10.0.0.2 before the initial sync: %+v, want withdrawn, waiting for the sync", got)
	}
	if n := e.Node(); n.Ready || !strings.Contains(n.Why, "initial sync") {
		t.Fatalf("node before the initial sync: %+v, want not ready, waiting for the sync", n)
	}
	if s := e.Sync(); s.Ready || !s.Enabled {
		t.Fatalf("Sync() = %+v", s)
	}
	rep.ready.Store(true)
	announces(t, speaker, "10.0.0.2/32")
	if n := e.Node(); !n.Ready {
		t.Fatalf("node after the initial sync: %+v, want ready", n)
	}
}

// runEngine runs an engine on the config yaml with opts (a prober with no results and a 1 ms apply
// interval unless set) until the test ends.
func runEngine(t *testing.T, yaml string, opts Options) *Engine {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	if opts.Prober == nil {
		opts.Prober = &fakeProber{states: map[string]health.Status{}}
	}
	if opts.MinApplyInterval == 0 {
		opts.MinApplyInterval = time.Millisecond
	}
	e := New(cfg, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = e.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return e
}

// announcingTo are Options that announce to speaker, as router id 10.9.0.11, every 5 ms.
func announcingTo(speaker *fakeSpeaker) Options {
	return Options{
		AnnounceInterval: 5 * time.Millisecond,
		RouterID:         func() (netip.Addr, error) { return netip.MustParseAddr("10.9.0.11"), nil },
		NewAnnouncer:     func(func(bgp.Event)) Announcer { return speaker },
	}
}
