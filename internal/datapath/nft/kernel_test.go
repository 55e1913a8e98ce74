package nft

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/plan"
)

// inFreshNetns runs fn on a thread switched into a new, empty network namespace holding one veth
// pair (10.91.2.1/24 on veth0), so that nft and the kernel see nothing but what the test makes.
func inFreshNetns(t *testing.T, fn func()) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: programs nftables in a network namespace")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("needs nft: ", err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.New()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic(err) // never leave the thread in the test namespace
		}
		ns.Close()
	}()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "veth0"}, PeerName: "veth1"}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"veth0", "veth1"} {
		l, _ := netlink.LinkByName(name)
		if err := netlink.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	addr, _ := netlink.ParseAddr("10.91.2.1/24")
	if err := netlink.AddrAdd(veth, addr); err != nil {
		t.Fatal(err)
	}
	fn()
}

func loadPlan(t *testing.T, path string) *plan.Plan {
	t.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Build(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// pending is the number of operations Apply would still send for p: 0 when the kernel matches.
func pending(t *testing.T, d *Datapath, p *plan.Plan) int {
	t.Helper()
	env, err := hostEnvironment(p.Interfaces)
	if err != nil {
		t.Fatal(err)
	}
	want, err := render(p, env)
	if err != nil {
		t.Fatal(err)
	}
	have, err := d.read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return reconcile(d.nft.NewTransaction(), have, want)
}

// TestKernelAcceptsEveryCase applies every golden config and every transition to a real kernel:
// nft must accept each transaction, a second Apply must find nothing to do, Status must read the
// services back, and Flush must leave no table behind.
func TestKernelAcceptsEveryCase(t *testing.T) {
	v4 := []string{"dsr-range-udp", "fallback", "nat-maglev", "wrr-hash-random"}
	inFreshNetns(t, func() {
		ctx := context.Background()
		d, err := New(slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		var steps []string
		for _, c := range append(v4, "fullnat-v6-rr") {
			steps = append(steps, filepath.Join("testdata/golden", c, "config.yaml"))
		}
		cases, _ := filepath.Glob("testdata/transitions/*")
		for _, c := range cases {
			steps = append(steps, filepath.Join(c, "before.yaml"), filepath.Join(c, "after.yaml"))
		}
		for _, step := range steps {
			p := loadPlan(t, step)
			if err := d.Apply(ctx, p); err != nil {
				t.Fatalf("%s: %v", step, err)
			}
			if n := pending(t, d, p); n != 0 {
				t.Fatalf("%s: kernel differs from the plan right after Apply (%d operations pending)", step, n)
			}
			status, err := d.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(status) != len(p.Services) {
				t.Fatalf("%s: Status shows %d services, plan has %d", step, len(status), len(p.Services))
			}
			for i, s := range status {
				if s.Name != p.Services[i].Name || len(s.Backends) != len(p.Services[i].Backends) || s.Slots != len(p.Services[i].Slots) {
					t.Fatalf("%s: Status %+v does not match plan service %s", step, s, p.Services[i].String())
				}
			}
		}
		if err := d.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if out, _ := exec.Command("nft", "list", "ruleset").Output(); len(out) != 0 {
			t.Fatalf("ruleset after Flush:\n%s", out)
		}
	})
}
