package bgp

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/lab"
	"github.com/sluicelb/sluice/internal/testutil"
)

// birdLabKind names TestBFDWithBird's fleet lab after the test process (lab.RunPrefix); a lab
// left by a run that was killed is torn down by the next run.
const birdLabKind = "sltestbfd"

// bfdSpeakerEnv makes the test binary, started in a balancer's namespace, the speaker of
// TestBFDWithBird: "ROUTER,ROUTER_ID" (see runBFDSpeaker).
const bfdSpeakerEnv = "SLUICE_TEST_BFD_SPEAKER"

// bfdHoldTime is the speaker's hold time with BIRD: long enough that only BFD can explain a
// withdrawal within seconds.
const bfdHoldTime = 30 * time.Second

func TestMain(m *testing.M) {
	if spec := os.Getenv(bfdSpeakerEnv); spec != "" {
		os.Exit(runBFDSpeaker(spec))
	}
	if os.Geteuid() == 0 {
		logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
		if err := lab.TearDownGone(context.Background(), logf, birdLabKind); err != nil {
			logf("tearing down the labs of earlier runs: %v", err)
		}
	}
	os.Exit(m.Run())
}

// runBFDSpeaker is a node: a speaker peering with BFD (100ms x 3) and a 30s hold time with the
// router, announcing lab.VIP4. It prints its view of the session whenever it changes, as a
// line "state=S bfd=B flaps=N error=E", and reads commands on stdin: "bfd DURATION" runs BFD
// with that interval; end of input stops it.
func runBFDSpeaker(spec string) int {
	router, id, _ := strings.Cut(spec, ",")
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "bfd speaker:", err)
		return 1
	}
	ctx := context.Background()
	s := New(slog.New(slog.NewTextHandler(os.Stderr, nil)), nil)
	defer s.Close(ctx)
	peer := Peer{Address: netip.MustParseAddr(router), ASN: lab.RouterASN, HoldTime: bfdHoldTime, BFD: &BFD{}}
	config := Config{ASN: lab.BalancerASN, RouterID: netip.MustParseAddr(id), ListenPort: -1, Peers: []Peer{peer}}
	if err := s.Configure(ctx, config); err != nil {
		return fail(err)
	}
	if err := s.Set(ctx, []Announcement{{Prefix: netip.PrefixFrom(netip.MustParseAddr(lab.VIP4), 32)}}); err != nil {
		return fail(err)
	}
	commands := make(chan string)
	go func() {
		defer close(commands)
		for in := bufio.NewScanner(os.Stdin); in.Scan(); {
			commands <- in.Text()
		}
	}()
	last := ""
	for tick := time.NewTicker(10 * time.Millisecond); ; {
		select {
		case cmd, ok := <-commands:
			if !ok {
				return 0
			}
			interval, err := time.ParseDuration(strings.TrimPrefix(cmd, "bfd "))
			if err != nil {
				return fail(err)
			}
			config.Peers[0].BFD = &BFD{Interval: interval}
			if err := s.Configure(ctx, config); err != nil {
				return fail(err)
			}
		case <-tick.C:
		}
		st, err := s.Status(ctx)
		if err != nil {
			return fail(err)
		}
		p := st.Peers[0]
		if line := fmt.Sprintf("state=%s bfd=%s flaps=%d error=%s", p.State, p.BFD, p.Flaps, p.LastError); line != last {
			fmt.Println(line)
			last = line
		}
	}
}

// bfdSpeaker is a runBFDSpeaker process, as TestBFDWithBird drives it.
type bfdSpeaker struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser

	mu   sync.Mutex
	line string // the last line it printed
}

// startBFDSpeaker runs the test binary as the speaker of balancer i in its namespace; it
// stops with the test.
func startBFDSpeaker(t *testing.T, l *lab.Lab, i int) *bfdSpeaker {
	t.Helper()
	exe, err := os.Executable()
	must(t, err)
	sp := &bfdSpeaker{cmd: l.Exec(context.Background(), l.BalancerNSOf(i), exe, "-test.run=^$")}
	sp.cmd.Env = append(os.Environ(), bfdSpeakerEnv+"="+l.RouterFrontAddr(false).String()+","+l.BalancerFrontAddr(i, false).String())
	sp.cmd.Stderr = testWriter{t}
	sp.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	sp.stdin, err = sp.cmd.StdinPipe()
	must(t, err)
	stdout, err := sp.cmd.StdoutPipe()
	must(t, err)
	must(t, sp.cmd.Start())
	t.Cleanup(func() {
		sp.stdin.Close()
		done := make(chan error, 1)
		go func() { done <- sp.cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = sp.cmd.Process.Kill()
			<-done
		}
	})
	go func() {
		for out := bufio.NewScanner(stdout); out.Scan(); {
			sp.mu.Lock()
			sp.line = out.Text()
			sp.mu.Unlock()
		}
	}()
	return sp
}

// says reports whether the speaker's last line has every one of words.
func (sp *bfdSpeaker) says(words ...string) bool {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return !slices.ContainsFunc(words, func(w string) bool { return !strings.Contains(sp.line, w) })
}

func (sp *bfdSpeaker) last() string {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.line
}

// needBirdLab skips (or fails, under SLUICE_TEST_STRICT) without root and the fleet lab's tools.
func needBirdLab(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.Missing(t, "needs root: builds a fleet lab in network namespaces")
	}
	for _, bin := range []string{"bird", "birdc", "nginx", "ip"} {
		if _, err := exec.LookPath(bin); err != nil {
			if _, err := os.Stat("/usr/sbin/" + bin); err != nil {
				testutil.Missing(t, "needs %s", bin)
			}
		}
	}
}

// TestBFDWithBird runs a speaker with BFD in a fleet lab balancer, against the lab router's
// BIRD 2 with BFD: the BFD session comes up on both sides; when the balancer is cut off the
// network (its switch ports down: no FIN, no link event at the router) BIRD withdraws its
// route on BFD's word, not the 30s hold timer's, and the speaker's session goes down for BFD
// too; back on the network, both sessions come up again. A change of the BFD interval
// restarts the session once and BIRD runs the new interval. The log has the time from each
// cut to the route gone from the router's kernel table.
func TestBFDWithBird(t *testing.T) {
	needBirdLab(t)
	ctx := t.Context()
	l := lab.New(lab.RunPrefix(birdLabKind, os.Getpid()), 1)
	l.Balancers = 2
	l.BFD = &lab.BFD{}
	t.Cleanup(func() {
		if err := l.Down(context.Background()); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	must(t, l.Up(ctx))
	sp := startBFDSpeaker(t, l, 1)
	node := l.BalancerFrontAddr(1, false)
	vip := netip.PrefixFrom(netip.MustParseAddr(lab.VIP4), 32)
	birdc := func(args ...string) string {
		out, err := l.Birdc(ctx, args...)
		must(t, err)
		return out
	}
	routed := func() bool {
		hops, err := l.RouterNextHops(vip)
		must(t, err)
		return slices.Equal(hops, []netip.Addr{node})
	}
	bfdUp := func() bool {
		for _, line := range strings.Split(birdc("show", "bfd", "sessions"), "\n") {
			if f := strings.Fields(line); len(f) > 2 && f[0] == node.String() && f[2] == "Up" {
				return true
			}
		}
		return false
	}
	up := func(what string) {
		t.Helper()
		waitFor(t, what+": the route via the node", routed)
		waitFor(t, what+": BIRD's BFD session up", bfdUp)
		waitFor(t, what+": the speaker's BFD session up", func() bool { return sp.says("state=established", "bfd=up") })
	}
	up("first")
	t.Logf("BIRD:\n%s", birdc("show", "bfd", "sessions"))

	var took []time.Duration
	for round := 1; round <= 5; round++ {
		cut := time.Now()
		must(t, l.CutBalancer(1))
		for routed() {
			if time.Since(cut) > bfdHoldTime/2 {
				t.Fatalf("round %d: the route via the cut node outlived half the hold time: BFD did not take it down", round)
			}
			time.Sleep(2 * time.Millisecond)
		}
		took = append(took, time.Since(cut))
		out := birdc("show", "protocols", "all", "lb1_v4")
		if !strings.Contains(out, "BFD session down") {
			t.Errorf("round %d: BIRD's lb1_v4 does not say BFD took it down:\n%s", round, out)
		}
		down := fmt.Sprintf("flaps=%d", round)
		waitFor(t, "the speaker's session down", func() bool { return sp.says(down) })
		if !sp.says("error=BFD down") || sp.says("state=established") {
			t.Errorf("round %d: the speaker's session did not go down for BFD: %s", round, sp.last())
		}
		must(t, l.RestoreBalancer(1))
		up(fmt.Sprintf("round %d", round))
	}
	slices.Sort(took)
	t.Logf("cut to route gone, %d rounds at 100ms x 3: median %s, all %v", len(took), took[len(took)/2].Round(time.Millisecond), took)

	if _, err := io.WriteString(sp.stdin, "bfd 200ms\n"); err != nil {
		t.Fatal(err)
	}
	flaps := fmt.Sprintf("flaps=%d", len(took)+1)
	waitFor(t, "the session restarted for the new interval", func() bool { return sp.says(flaps, "state=established", "bfd=up") })
	waitFor(t, "BIRD's BFD session at 200ms", func() bool {
		return bfdUp() && strings.Contains(birdc("show", "bfd", "sessions"), "0.200")
	})
	t.Logf("BIRD:\n%s", birdc("show", "bfd", "sessions"))
}
