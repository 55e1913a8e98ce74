package conntrackd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/netnstest"
	"github.com/sluicelb/sluice/internal/testutil"
)

const testPort = 3781

var (
	addrA       = netip.MustParseAddr("10.77.0.1")
	addrB       = netip.MustParseAddr("10.77.0.2")
	addrForeign = netip.MustParseAddr("10.77.0.3") // on B's side of the link, not a peer
)

// node is one side of the test: its namespace and Supervisor.
type node struct {
	ns   netns.NsHandle
	sup  *Supervisor
	opts *Options
}

// testLog passes the Supervisor's log to the test's.
type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// syncPair makes two namespaces joined by a veth (the sync link, no link to the host's
// namespace) and a Supervisor in each, stopped when the test ends.
func syncPair(t *testing.T) (a, b *node) {
	t.Helper()
	for _, tool := range []string{"conntrackd", "conntrack", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.Missing(t, "needs %s (scripts/deps.sh)", tool)
		}
	}
	nsA, nsB := netnstest.Joined(t, netnstest.End{Name: "sync-a", Addrs: []netip.Prefix{netip.PrefixFrom(addrA, 24)}},
		netnstest.End{Name: "sync-b", Addrs: []netip.Prefix{netip.PrefixFrom(addrB, 24), netip.PrefixFrom(addrForeign, 24)}})
	a, b = &node{ns: nsA}, &node{ns: nsB}
	a.sup, b.sup = supervisorIn(t, a.ns), supervisorIn(t, b.ns)
	a.opts = &Options{Interface: "sync-a", Peers: []netip.Addr{addrB}, Port: testPort, StateDir: t.TempDir()}
	b.opts = &Options{Interface: "sync-b", Address: addrB, Peers: []netip.Addr{addrA}, Port: testPort, StateDir: t.TempDir()}
	return a, b
}

// supervisorIn is a Supervisor acting in ns, stopped when the test ends.
func supervisorIn(t *testing.T, ns netns.NsHandle) *Supervisor {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var sup *Supervisor
	netnstest.In(t, ns, func() {
		var err error
		sup, err = New(ctx, slog.New(slog.NewTextHandler(testLog{t}, nil)), nil)
		must(t, err)
	})
	t.Cleanup(func() { cancel(); <-sup.Done() })
	return sup
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// run runs a command in ns.
func run(t *testing.T, ns netns.NsHandle, name string, args ...string) (string, error) {
	t.Helper()
	var out []byte
	var err error
	netnstest.In(t, ns, func() { out, err = exec.Command(name, args...).CombinedOutput() })
	return string(out), err
}

// ipv4Flows lists ns's kernel conntrack table of IPv4.
func ipv4Flows(t *testing.T, ns netns.NsHandle) []*netlink.ConntrackFlow {
	t.Helper()
	h, err := netlink.NewHandleAt(ns)
	must(t, err)
	defer h.Close()
	flows, err := h.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
	must(t, err)
	return flows
}

// hasFlow tells whether ns's kernel conntrack table has the test's flow from port.
func hasFlow(t *testing.T, ns netns.NsHandle, port uint16) bool {
	t.Helper()
	for _, f := range ipv4Flows(t, ns) {
		if f.Forward.SrcIP.Equal(net.ParseIP("10.1.1.1")) && f.Forward.SrcPort == port && f.Forward.DstPort == 80 {
			return true
		}
	}
	return false
}

// insertFlow inserts the test's flow from port into ns's kernel conntrack table.
func insertFlow(t *testing.T, ns netns.NsHandle, port uint16) {
	t.Helper()
	if out, err := run(t, ns, "conntrack", "-I", "-p", "tcp", "-s", "10.1.1.1", "-d", "10.2.2.2", "--sport", fmt.Sprint(port),
		"--dport", "80", "--state", "ESTABLISHED", "-t", "600", "-u", "SEEN_REPLY"); err != nil {
		t.Fatalf("conntrack -I: %v: %s", err, out)
	}
}

func TestSupervisorReplicates(t *testing.T) {
	a, b := syncPair(t)
	ctx := context.Background()
	must(t, a.sup.Set(ctx, a.opts))
	must(t, b.sup.Set(ctx, b.opts))
	must(t, a.sup.Set(ctx, a.opts.Clone())) // the same options again: nothing changes
	pid := a.sup.Status().PID
	// A flow made before conntrackd listens is never sent live (the resync of internal/cttable
	// brings it): the flows come once each process hears the other.
	for _, n := range []*node{a, b} {
		testutil.Eventually(t, "conntrackd hearing its peer", func() bool { return n.sup.Status().Stats.PacketsReceived > 0 })
	}

	t.Run("conntrackd time-shared, not real-time", func(t *testing.T) {
		for _, n := range []*node{a, b} {
			testutil.Eventually(t, "conntrackd in SCHED_NORMAL", func() bool {
				attr, err := unix.SchedGetAttr(n.sup.Status().PID, 0)
				return err == nil && attr.Policy == unix.SCHED_NORMAL
			})
		}
	})

	t.Run("flow written into the peer's kernel table", func(t *testing.T) {
		start := time.Now()
		insertFlow(t, a.ns, 1234)
		testutil.Eventually(t, "the flow in B's conntrack table", func() bool { return hasFlow(t, b.ns, 1234) })
		t.Logf("replication lag (insert in A to seen in B's table, polled): %s", time.Since(start))
		testutil.Eventually(t, "B's statistics counting it", func() bool {
			st := b.sup.Status()
			return st.Running && st.Stats.InjectCreated > 0 && st.Stats.PacketsReceived > 0 && st.Stats.Link == "sync-b"
		})
		if st := a.sup.Status(); st.PID != pid || st.Restarts != 0 {
			t.Errorf("setting the same options restarted conntrackd: %+v", st)
		}
	})

	t.Run("foreign sender dropped and counted", func(t *testing.T) {
		netnstest.In(t, b.ns, func() {
			c, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addrForeign, 0)),
				net.UDPAddrFromAddrPort(netip.AddrPortFrom(addrA, testPort)))
			must(t, err)
			defer c.Close()
			_, err = c.Write([]byte("forged update"))
			must(t, err)
		})
		testutil.Eventually(t, "A counting the foreign packet", func() bool { return a.sup.Status().ForeignDrops > 0 })
		if st := a.sup.Status(); st.Stats.MalformedMessages != 0 {
			t.Errorf("the foreign packet reached conntrackd: %+v", st.Stats)
		}
	})

	t.Run("a restarted node gets the live changes", func(t *testing.T) {
		// conntrackd's FTFW starts anew with a peer that restarted, both ways: B's changes reach
		// A's new process without A asking for a resync (cttable's resync brings the earlier
		// ones), and A's reach B.
		must(t, a.sup.Set(ctx, nil))
		restarted := supervisorIn(t, a.ns)
		must(t, restarted.Set(ctx, a.opts))
		testutil.Eventually(t, "A's new conntrackd hearing from B", func() bool { return restarted.Status().Stats.PacketsReceived > 0 })
		insertFlow(t, b.ns, 1235)
		testutil.Eventually(t, "B's new flow in A's table", func() bool { return hasFlow(t, a.ns, 1235) })
		insertFlow(t, a.ns, 1236)
		testutil.Eventually(t, "the restarted A's new flow in B's table", func() bool { return hasFlow(t, b.ns, 1236) })
		must(t, restarted.Set(ctx, nil))
		must(t, a.sup.Set(ctx, a.opts))
	})

	t.Run("killed conntrackd restarted", func(t *testing.T) {
		testutil.Eventually(t, "A running", func() bool { return a.sup.Status().Running })
		stopped, restarted := make(chan time.Time, 1), make(chan struct{}, 1)
		a.sup.OnLapse(Lapses{Stopped: func(at time.Time) { stopped <- at }, Restarted: func() { restarted <- struct{}{} }})
		defer a.sup.OnLapse(Lapses{})
		old := a.sup.Status()
		killed := time.Now()
		must(t, syscall.Kill(old.PID, syscall.SIGKILL))
		testutil.Eventually(t, "A restarted", func() bool {
			st := a.sup.Status()
			return st.Running && st.PID != old.PID && st.Restarts > old.Restarts
		})
		select {
		case at := <-stopped:
			if at.Before(killed) {
				t.Errorf("the lapse told as stopped at %s, before the kill at %s", at, killed)
			}
		default:
			t.Errorf("the lapse not told as stopped")
		}
		testutil.Eventually(t, "the lapse told as over once the new process is set up", func() bool { return len(restarted) == 1 })
		if st := a.sup.Status(); st.CPUSeconds < old.CPUSeconds {
			t.Errorf("conntrackd's CPU time went back from %gs to %gs when it restarted", old.CPUSeconds, st.CPUSeconds)
		}
	})

	t.Run("Set(nil) stops it and removes the rules", func(t *testing.T) {
		pid := a.sup.Status().PID
		must(t, a.sup.Set(ctx, nil))
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("conntrackd %d still there after Set(nil): %v", pid, err)
		}
		if out, err := run(t, a.ns, "nft", "list", "table", "inet", RulesTable); err == nil {
			t.Errorf("table inet %s still there:\n%s", RulesTable, out)
		}
		if st := a.sup.Status(); st.Running || st.Options != nil {
			t.Errorf("status after Set(nil): %+v", st)
		}
	})
}

func TestSupervisorRefuses(t *testing.T) {
	a, _ := syncPair(t)
	ctx := context.Background()
	for _, c := range []struct {
		field string
		edit  func(*Options)
	}{
		{"sync.interface", func(o *Options) { o.Interface = "nosuch0" }},
		{"sync.address", func(o *Options) { o.Address = netip.MustParseAddr("10.77.0.9") }},
		{"sync.peers[1]", func(o *Options) { o.Peers = []netip.Addr{addrB, addrA} }},
		{"sync", func(o *Options) { o.Binary = "/nonexistent/conntrackd" }},
	} {
		o := a.opts.Clone()
		c.edit(o)
		err := a.sup.Set(ctx, o)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%+v: %v, want an error naming %s", o, err, c.field)
		}
		if c.field == "sync" && (err == nil || !strings.Contains(err.Error(), "apt-get install conntrackd")) {
			t.Errorf("a missing conntrackd: %v", err)
		}
	}
	if st := a.sup.Status(); st.Running || st.Options != nil {
		t.Errorf("a refusal started something: %+v", st)
	}
	if out, err := run(t, a.ns, "nft", "list", "table", "inet", RulesTable); err == nil {
		t.Errorf("a refusal installed table inet %s:\n%s", RulesTable, out)
	}
}

// TestSupervisorGuardOutlivesItsCaller: a guard transaction begun runs to its end though the
// caller's context ends meanwhile (a daemon stopping as its replication starts): the table is in,
// beside hears it committed, and the stop that follows removes it (committed too). Cut, nft was
// killed halfway: the table in the kernel or not, known to no one, and left behind when it was.
func TestSupervisorGuardOutlivesItsCaller(t *testing.T) {
	a, _ := syncPair(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var committed []bool
	beside := func(commit func() (bool, error)) error {
		cancel() // the caller's context ends once the transaction has begun
		ok, err := commit()
		committed = append(committed, ok)
		return err
	}
	supCtx, stop := context.WithCancel(context.Background())
	defer stop()
	var sup *Supervisor
	netnstest.In(t, a.ns, func() {
		var err error
		sup, err = New(supCtx, slog.New(slog.NewTextHandler(testLog{t}, nil)), beside)
		must(t, err)
	})
	if err := sup.Set(ctx, a.opts); err != nil {
		t.Fatalf("Set, its context ended while the guard was written: %v", err)
	}
	if out, err := run(t, a.ns, "nft", "list", "table", "inet", RulesTable); err != nil {
		t.Errorf("table inet %s is not in: %v\n%s", RulesTable, err, out)
	}
	stop()
	testutil.EventuallyClosed(t, "the supervisor's stop", sup.Done())
	if out, err := run(t, a.ns, "nft", "list", "table", "inet", RulesTable); err == nil {
		t.Errorf("the stop left table inet %s behind:\n%s", RulesTable, out)
	}
	if len(committed) != 2 || !committed[0] || !committed[1] {
		t.Errorf("beside heard %v, want both transactions committed", committed)
	}
	if err := sup.guardTable(ctx, nil); err == nil || len(committed) != 2 {
		t.Errorf("a guard transaction asked for after its caller's context ended: %v, beside heard %v", err, committed)
	}
}

// TestSupervisorFailedSetChangesNothing: a Set that cannot write conntrackd's configuration (its
// path is a directory) leaves the running conntrackd and the guard of its port as they were.
func TestSupervisorFailedSetChangesNothing(t *testing.T) {
	a, _ := syncPair(t)
	ctx := context.Background()
	must(t, a.sup.Set(ctx, a.opts))
	testutil.Eventually(t, "conntrackd running", func() bool { return a.sup.Status().PID != 0 })
	pid := a.sup.Status().PID
	o := a.opts.Clone()
	o.Port, o.StateDir = testPort+10, t.TempDir()
	must(t, os.MkdirAll(filepath.Join(o.ConfigPath(), "in-the-way"), 0o700))
	if err := a.sup.Set(ctx, o); err == nil {
		t.Fatal("a Set whose configuration cannot be written succeeded")
	}
	if st := a.sup.Status(); !st.Running || st.PID != pid {
		t.Errorf("the failed Set changed the running conntrackd: %+v, want pid %d still running", st, pid)
	}
	out, err := run(t, a.ns, "nft", "list", "table", "inet", RulesTable)
	if err != nil || !strings.Contains(out, fmt.Sprintf("udp dport %d accept", testPort)) || strings.Contains(out, fmt.Sprint(testPort+10)) {
		t.Errorf("the failed Set changed the guard of port %d: %v\n%s", testPort, err, out)
	}
}
