package napi

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/ethtool"
	"github.com/sluicelb/sluice/internal/netnstest"
	"github.com/sluicelb/sluice/internal/testutil"
)

// TestThreadedPollersArePlaced: a veth has no NAPI instance until GRO is on, no polling thread
// until threaded mode is on, and Place pins that thread to a CPU at a SCHED_FIFO priority.
func TestThreadedPollersArePlaced(t *testing.T) {
	if os.Geteuid() != 0 {
		testutil.Missing(t, "needs root for a network namespace")
	}
	ns := fmt.Sprintf("sluice-napi-test-%d", os.Getpid())
	run(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	run(t, "ip", "-n", ns, "link", "add", "napi0", "type", "veth", "peer", "name", "napi1")
	run(t, "ip", "-n", ns, "link", "set", "napi0", "up")
	run(t, "ip", "-n", ns, "link", "set", "napi1", "up")

	handle, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { handle.Close() })
	inNS := func(fn func() error) {
		t.Helper()
		var err error
		netnstest.In(t, handle, func() { err = fn() })
		if err != nil {
			t.Fatal(err)
		}
	}
	of := func() []Instance {
		t.Helper()
		var got []Instance
		inNS(func() (err error) {
			got, err = Of("napi0")
			return err
		})
		return got
	}
	if got := of(); len(got) != 0 {
		t.Fatalf("a veth without GRO or XDP: %v, want no NAPI instance", got)
	}
	inNS(func() error { return ethtool.Set("napi0", unix.ETHTOOL_SGRO, true) })
	got := of()
	if len(got) == 0 || got[0].ID == 0 || got[0].PID != 0 {
		t.Fatalf("GRO on: %v, want instances with an id and no thread", got)
	}
	if err := Place(got, 0, 10); err == nil {
		t.Fatal("Place of an instance without a thread: no error")
	}
	run(t, "ip", "netns", "exec", ns, "sh", "-c", "echo 1 > /sys/class/net/napi0/threaded")
	got = of()
	if len(got) == 0 {
		t.Fatal("threaded: no NAPI instance")
	}
	if err := Place(got, 0, 10); err != nil {
		t.Fatal(err)
	}
	for _, in := range got {
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(in.PID, &set); err != nil {
			t.Fatal(err)
		}
		attr, err := unix.SchedGetAttr(in.PID, 0)
		if err != nil {
			t.Fatal(err)
		}
		if set.Count() != 1 || !set.IsSet(0) || attr.Policy != unix.SCHED_FIFO || attr.Priority != 10 {
			t.Errorf("NAPI %d's thread %d: %d CPUs (CPU 0: %v), policy %d priority %d; want CPU 0 alone, SCHED_FIFO 10",
				in.ID, in.PID, set.Count(), set.IsSet(0), attr.Policy, attr.Priority)
		}
	}
}

func run(t *testing.T, argv ...string) {
	t.Helper()
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%v: %v: %s", argv, err, out)
	}
}
