package lab

import (
	"context"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/internal/decap"
)

// routedLabKind names TestRoutedLab's lab after the test process, like testLabKind.
const routedLabKind = "sltestrt"

func TestRoutedPlan(t *testing.T) {
	l := New("x", 2)
	l.RoutedBackends = true
	if err := l.validate(); err != nil {
		t.Fatal(err)
	}
	wantNS := []string{"x-client", "x-lb", "x-sw", "x-router", "x-b1", "x-b2"}
	if got := l.Namespaces(); !slices.Equal(got, wantNS) {
		t.Fatalf("namespaces %v, want %v", got, wantNS)
	}
	for _, c := range []struct {
		got  netip.Addr
		want string
	}{
		{l.BackendAddr(1, false), "10.92.1.11"},
		{l.BackendAddr(2, true), "fd00:93:1::11"},
		{l.BackendGateway(2, false), "10.93.1.1"},
		{l.RouterBridgeAddr(true), "fd00:91:2::fe"},
	} {
		if c.got.String() != c.want {
			t.Errorf("got %s, want %s", c.got, c.want)
		}
	}
	big := New("x", MaxBackends)
	big.RoutedBackends = true
	requireDistinctAddressesAndNames(t, big)
	l.Balancers = 2
	if l.validate() == nil {
		t.Error("routed backends with a fleet validated")
	}
}

// TestRoutedLab builds a lab with routed backends: each answers over IPv4 and IPv6 through the
// router, on a subnet of its own, and runs sluice decap on its eth0; Down removes its pins.
func TestRoutedLab(t *testing.T) {
	needRoot(t)
	l := New(RunPrefix(routedLabKind, os.Getpid()), 2)
	l.RoutedBackends = true
	_, _, st := upTwice(t, l)
	if !st.Ready() {
		t.Fatalf("lab not ready:\n%s", st)
	}
	for i := 1; i <= l.Backends; i++ {
		for _, v6 := range []bool{false, true} {
			out := curl(t, l, "http://"+netip.AddrPortFrom(l.BackendAddr(i, v6), 80).String()+"/")
			if !strings.HasSuffix(out, BackendName(i)+"\n") {
				t.Errorf("backend %d v6=%v: %q", i, v6, out)
			}
		}
		var ds decap.Status
		if err := l.Do(l.BackendNS(i), func() (err error) {
			ds, err = decap.ReadStatus(decap.Options{PinPath: l.decapPinPath(i)})
			return err
		}); err != nil || !slices.Equal(ds.Interfaces, []string{"eth0"}) {
			t.Errorf("backend %d: decap %+v (%v), want on eth0", i, ds, err)
		}
	}
	if err := l.Down(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(l.decapPinPath(1)); !os.IsNotExist(err) {
		t.Errorf("decap pins left after Down: %v", err)
	}
}
