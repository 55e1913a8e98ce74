package engine

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/datapath/fake"
	"github.com/sluicelb/sluice/internal/health"
	"github.com/sluicelb/sluice/internal/plan"
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
	cfg, err := config.Parse("test.yaml", []byte(nodeConfig))
	if err != nil {
		t.Fatal(err)
	}
	dp := &forwardingDatapath{Datapath: fake.New()}
	e := New(cfg, Options{Datapath: dp, Prober: &fakeProber{states: map[string]health.Status{}}, MinApplyInterval: time.Millisecond})
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
