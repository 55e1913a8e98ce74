package ebpf

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/netnstest"
)

// TestForwardingOffDropsAreCountedNotForwarded: real connections to a dsr service on tc, through
// the traffic lab's namespaces with the Datapath as the daemon runs it. With IPv4 forwarding
// turned off in the balancer's namespace only, a connection fails, and its SYNs count as dropped
// for forwarding disabled and in no backend's packets; Apply refuses naming net.ipv4.ip_forward;
// once forwarding is back on, connections go through again.
func TestForwardingOffDropsAreCountedNotForwarded(t *testing.T) {
	l := newTrafficLab(t)
	l.serve(t)
	pin := privatePinPath(t)
	netnstest.Enter(t, l.lb)
	d, err := New(slog.New(slog.NewTextHandler(io.Discard, nil)), Options{PinPath: pin, Interfaces: []string{"cli0", "srv0"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	p := planFromYAML(t, `
datapath: ebpf
services:
  - name: web
    vip: 10.0.9.3
    port: 80
    mode: dsr
    backends: [{address: 10.0.2.11}]
`)
	ctx := context.Background()
	if err := d.Apply(ctx, p); err != nil {
		t.Fatal(err)
	}
	vip := netip.AddrPortFrom(trafficVIPs["dsr"][0], 80)
	l.echoTCP(t, vip)
	before := webStatus(t, d)

	sysctls(t, map[string]string{"ipv4/conf/all/forwarding": "0"})
	var dialErr error
	netnstest.In(t, l.client, func() {
		var c net.Conn
		if c, dialErr = net.DialTimeout("tcp", vip.String(), 2*time.Second); dialErr == nil {
			c.Close()
		}
	})
	if dialErr == nil {
		t.Fatal("a connection went through with forwarding off")
	}
	after := webStatus(t, d)
	if *after.Backends[0].Packets != *before.Backends[0].Packets {
		t.Errorf("the backend counted %d packets, then %d with every SYN dropped", *before.Backends[0].Packets, *after.Backends[0].Packets)
	}
	if u := after.Unforwarded; u.ForwardingDisabled == 0 || u.NoRoute != 0 || u.NoNeighbour != 0 {
		t.Errorf("not forwarded %+v, want the SYNs under forwarding disabled", u)
	}
	if got, err := d.Unforwarded(ctx); err != nil || got["web"] != after.Unforwarded {
		t.Errorf("Unforwarded = %v, %v; want web's %+v", got, err, after.Unforwarded)
	}
	err = d.Apply(ctx, p)
	var fe *datapath.ForwardingError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "net.ipv4.ip_forward=0") || !strings.Contains(err.Error(), "sysctl -w net.ipv4.ip_forward=1") {
		t.Fatalf("Apply with forwarding off = %v, want a ForwardingError naming net.ipv4.ip_forward", err)
	}

	sysctls(t, map[string]string{"ipv4/conf/all/forwarding": "1"})
	if err := d.Apply(ctx, p); err != nil {
		t.Fatal(err)
	}
	l.echoTCP(t, vip)
}

// webStatus reads the status of the service web.
func webStatus(t *testing.T, d *Datapath) datapath.ServiceStatus {
	t.Helper()
	st, found, err := d.ServiceStatus(context.Background(), "web")
	if err != nil || !found || len(st.Backends) != 1 || st.Backends[0].Packets == nil {
		t.Fatalf("status of web: %+v, %v, %v", st, found, err)
	}
	return st
}
