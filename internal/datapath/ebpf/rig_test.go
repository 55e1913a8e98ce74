package ebpf

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/netnstest"
	"github.com/sluicelb/sluice/internal/plan"
	"github.com/sluicelb/sluice/internal/testutil"
)

// rig is a throwaway place for kernel tests: a private BPF filesystem for the pins and a fresh
// network namespace that forwards, as a balancer does, holding one veth pair (veth0: 10.91.2.1/24
// and fd00:91:2::1/64), which the test's goroutine runs in. Everything is undone when the test ends, also when it fails.
type rig struct {
	t   *testing.T
	pin string // the pin path, on the private BPF filesystem
}

// newRig sets a rig up; it skips the test without root.
func newRig(t *testing.T) *rig {
	if os.Geteuid() != 0 {
		testutil.Missing(t, "needs root: loads BPF programs and maps, pins them and attaches to a veth in a network namespace")
	}
	pin := privatePinPath(t)
	netnstest.EnterNew(t)
	forwardingOn(t)
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "veth0"}, PeerName: "veth1"}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"veth0", "veth1"} {
		l, err := netlink.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range []string{"10.91.2.1/24", "fd00:91:2::1/64"} {
		addr, _ := netlink.ParseAddr(a)
		addr.Flags = unix.IFA_F_NODAD
		if err := netlink.AddrAdd(veth, addr); err != nil {
			t.Fatal(err)
		}
	}
	return &rig{t: t, pin: pin}
}

// privatePinPath mounts a BPF filesystem of the test's own, unmounted when it ends, and returns
// a pin path on it.
func privatePinPath(t *testing.T) string { return testutil.PrivateBPFFS(t, "sluice") }

// forwardingOn turns IPv4 and IPv6 forwarding on in the calling thread's network namespace, as on
// a balancer: bpf_fib_lookup refuses to route what arrives on an interface that does not forward.
func forwardingOn(tb testing.TB) {
	tb.Helper()
	for _, s := range []string{"net/ipv4/conf/all/forwarding", "net/ipv6/conf/all/forwarding"} {
		if err := os.WriteFile(filepath.Join("/proc/sys", s), []byte("1"), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
}

// datapath returns a Datapath over the rig's pin path, attaching to veth0, closed when the test
// ends (Flush is up to the test).
func (r *rig) datapath(opts Options) *Datapath {
	r.t.Helper()
	opts.PinPath = r.pin
	if opts.Interfaces == nil {
		opts.Interfaces = []string{"veth0"}
	}
	d, err := New(slog.New(slog.NewTextHandler(io.Discard, nil)), opts)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { d.Close() })
	return d
}

// apply applies p and returns how many map entries it wrote.
func (r *rig) apply(d *Datapath, p *plan.Plan) int {
	r.t.Helper()
	writes, err := d.apply(context.Background(), p)
	if err != nil {
		r.t.Fatal(err)
	}
	return writes
}

// planFromYAML builds the plan of a YAML config.
func planFromYAML(t *testing.T, yaml string) *plan.Plan {
	t.Helper()
	p := testutil.Plan(t, yaml)
	for i := range p.Services {
		if p.Services[i].FlowTimeout == config.DefaultFlowTimeout {
			p.Services[i].FlowTimeout = testFlowTimeout
		}
	}
	return p
}
