package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/api"
	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath/fake"
	"github.com/sluicelb/sluice/internal/engine"
	"github.com/sluicelb/sluice/internal/health"
	"github.com/sluicelb/sluice/internal/metrics"
)

// floodEnv names the addresses TestFloodClient floods; without it, that test is skipped.
const floodEnv = "SLUICE_TEST_FLOOD"

// floodConns is how many connections the flood opens to each address.
const floodConns = 1500

// floodReport is what TestFloodClient prints on its last line.
type floodReport struct {
	Dialed, ClosedByServer int
	Errors                 []string
}

// TestFloodClient is the flood, run as a process of its own by TestListenersUnderFlood so that its
// connections do not count against the daemon's open-file limit. It opens floodConns silent
// connections to each address (half of them send the start of a request line and stall), says
// "flooding" on stdout, then waits until the server closes each one.
func TestFloodClient(t *testing.T) {
	addrs := os.Getenv(floodEnv)
	if addrs == "" {
		t.Skip("the flood of TestListenersUnderFlood")
	}
	var conns []net.Conn
	var report floodReport
	for _, addr := range strings.Split(addrs, ",") {
		for i := range floodConns {
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				report.Errors = append(report.Errors, err.Error())
				continue
			}
			if i%2 == 1 {
				_, _ = io.WriteString(c, "GET /metrics HTTP/1.1\r\n")
			}
			conns = append(conns, c)
		}
	}
	report.Dialed = len(conns)
	fmt.Println("flooding")
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, c := range conns {
		wg.Go(func() {
			defer c.Close()
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Minute)) // a bound for a broken server, not a timing
			_, err := io.Copy(io.Discard, c)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				report.ClosedByServer++
			} else if len(report.Errors) < 10 {
				report.Errors = append(report.Errors, err.Error())
			}
		})
	}
	wg.Wait()
	out, _ := json.Marshal(report)
	fmt.Printf("\n%s\n", out)
}

// TestListenersUnderFlood floods the TCP API and the metrics listener of the daemon's listeners
// with thousands of idle connections from another process, with the daemon's open-file limit
// lowered below their number: the API socket must still answer, a health probe still run, the
// goroutines and open files stay bounded, and the timeouts close every flooding connection.
func TestListenersUnderFlood(t *testing.T) {
	data, err := os.ReadFile("/proc/sys/net/core/somaxconn")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := strconv.Atoi(strings.TrimSpace(string(data))); err != nil || n < floodConns {
		t.Skipf("net.core.somaxconn %q: the backlog cannot hold the %d connections of the flood", data, floodConns)
	}
	const fdLimit = 1024 // below the 2 × floodConns connections of the flood
	lowerFDLimit(t, fdLimit)
	log := slog.New(slog.DiscardHandler)
	cfg, err := config.Parse("flood.yaml", []byte("services:\n  - {name: web, vip: 192.0.2.10, port: 80, backends: [{address: 10.0.0.1}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New("test", log)
	e := engine.New(cfg, engine.Options{Datapath: fake.New(), Log: log, MinApplyInterval: time.Millisecond, Resync: time.Hour})
	m.Watch(e, metrics.WatchOptions{MaxBackends: metrics.DefaultMaxBackends})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); _ = e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-ran })

	o := &serveOptions{listen: "127.0.0.1:0", metricsListen: "127.0.0.1:0", conns: connLimits{socket: 64, listen: 100, metrics: 50}}
	if err := checkConnLimits(o, fdLimit, cfg, log); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(t.TempDir(), "sluice.sock")
	token := "flood-test-token-0123456789"
	servers, err := listen(socket, o, token, api.NewHandler(e, api.Info{Version: "test"}), m.Handler(), log)
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, s := range servers {
		s.ReadHeaderTimeout = 200 * time.Millisecond // the flood's connections are silent: this closes them
		served := make(chan error, 1)
		go func() { served <- s.serve() }()
		t.Cleanup(func() {
			s.Close()
			if err := <-served; !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("%s: %v", s.addr, err)
			}
		})
		if !strings.HasSuffix(s.addr, ".sock") {
			addrs = append(addrs, s.addr)
		}
	}
	probed, err := net.Listen("tcp", "127.0.0.1:0") // a backend for the health probe
	if err != nil {
		t.Fatal(err)
	}
	defer probed.Close()
	checker, err := health.NewChecker(&config.HealthCheck{Type: "tcp"})
	if err != nil {
		t.Fatal(err)
	}
	goroutinesBefore := runtime.NumGoroutine()

	flood := exec.Command(os.Args[0], "-test.run=^TestFloodClient$", "-test.v")
	flood.Env = append(os.Environ(), floodEnv+"="+strings.Join(addrs, ","))
	stdout, err := flood.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	flood.Stderr = os.Stderr
	if err := flood.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = flood.Process.Kill(); _ = flood.Wait() })
	output := make(chan string, 1)
	flooding := make(chan struct{})
	go func() {
		var all strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := stdout.Read(buf)
			all.Write(buf[:n])
			if strings.Contains(all.String(), "flooding") {
				select {
				case <-flooding:
				default:
					close(flooding)
				}
			}
			if err != nil {
				output <- all.String()
				return
			}
		}
	}()
	select {
	case <-flooding:
	case out := <-output:
		t.Fatalf("the flood did not start: %s", out)
	}

	// While flooded: the socket answers, a probe runs, goroutines and files stay bounded.
	c := api.NewUnixClient(socket)
	if _, err := c.Status(context.Background()); err != nil {
		t.Errorf("the API socket under flood: %v", err)
	}
	target := netip.MustParseAddrPort(probed.Addr().String())
	if r := checker.Check(context.Background(), target); !r.OK {
		t.Errorf("a health probe under flood: %s", r.Message)
	}
	maxGoroutines, maxFiles := 0, 0
	var out string
	for out == "" {
		maxGoroutines = max(maxGoroutines, runtime.NumGoroutine())
		maxFiles = max(maxFiles, openFiles(t))
		select {
		case out = <-output:
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := flood.Wait(); err != nil {
		t.Fatalf("the flood: %v\n%s", err, out)
	}
	if bound := goroutinesBefore + o.conns.listen + o.conns.metrics + 20; maxGoroutines > bound {
		t.Errorf("%d goroutines under flood, want at most %d", maxGoroutines, bound)
	}
	if maxFiles >= fdLimit-datapathFDs {
		t.Errorf("%d files open under flood, want under %d", maxFiles, fdLimit-datapathFDs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var report floodReport
	for _, line := range lines {
		if strings.HasPrefix(line, "{") {
			if err := json.Unmarshal([]byte(line), &report); err != nil {
				t.Fatal(err)
			}
		}
	}
	if report.Dialed < floodConns || report.ClosedByServer != report.Dialed {
		t.Errorf("the flood dialed %d connections, %d closed by the server (errors %v); want at least %d, all closed",
			report.Dialed, report.ClosedByServer, report.Errors, floodConns)
	}
	t.Logf("flood: %d connections, all closed by the server; at most %d goroutines (%d before), %d open files",
		report.Dialed, maxGoroutines, goroutinesBefore, maxFiles)

	// After the flood the TCP API serves its token holders again.
	tcp := api.NewTCPClient("http://"+addrs[0], token)
	if _, err := tcp.Status(context.Background()); err != nil {
		t.Errorf("the TCP API after the flood: %v", err)
	}
}

// lowerFDLimit sets the soft open-file limit of the test process to n until the test ends.
func lowerFDLimit(t *testing.T, n uint64) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	if rl.Max < n {
		t.Skipf("the hard open-file limit %d is under %d", rl.Max, n)
	}
	lowered := rl
	lowered.Cur = n
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lowered); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
			t.Error(err)
		}
	})
}

// openFiles counts the file descriptors the test process holds.
func openFiles(t *testing.T) int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

func TestCheckConnLimits(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	cfg := &config.Config{}
	defaults := connLimits{socket: 64, listen: 256, metrics: 16}
	for _, tc := range []struct {
		name    string
		o       serveOptions
		fdLimit uint64
		want    string // part of the error; "" for none
	}{
		{"socket alone", serveOptions{conns: defaults}, 1024, ""},
		{"every listener", serveOptions{listen: ":1", metricsListen: ":2", conns: defaults}, 1024, ""},
		{"over half", serveOptions{listen: ":1", metricsListen: ":2", conns: defaults}, 512,
			"--socket-max-conns 64 + --listen-max-conns 256 + --metrics-max-conns 16 = 336 connections: more than half of the open-file limit (RLIMIT_NOFILE 512)"},
		{"unused listener not counted", serveOptions{conns: connLimits{socket: 64, listen: 100000, metrics: 16}}, 1024, ""},
		{"zero", serveOptions{conns: connLimits{socket: 64, listen: 0, metrics: 16}}, 1024, "--listen-max-conns 0: want at least 1"},
	} {
		err := checkConnLimits(&tc.o, tc.fdLimit, cfg, log)
		if got := fmt.Sprint(err); (tc.want == "") != (err == nil) || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
