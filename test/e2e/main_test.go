package e2e

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/lab"
	"github.com/sluicelb/sluice/internal/testutil"
)

// Every lab of a run of the suite is named after the supervising process (lab.RunPrefix:
// slt4242-client, slt4242-lb, ..., sbl4242-lb for bench lb's), so that runs on one host never
// tear down each other's labs; a run tears down only the labs of runs that are gone.
const (
	labKind        = "slt" // the suite's lab
	benchLBKind    = "sbl" // the lab `sluice-lab bench lb` builds
	benchNetKind   = "sbn" // the lab `sluice-lab bench net` builds
	benchScaleKind = "sbs" // the lab `sluice-lab bench scale` builds
	benchFleetKind = "sbf" // the lab `sluice-lab bench fleet` builds
	benchFloodKind = "sbd" // the lab `sluice-lab bench flood` builds
	benchPPSKind   = "sbp" // the lab `sluice-lab bench pps` builds
)

// runOwner is the pid of the run's supervising process, which names its labs.
var runOwner = os.Getpid()

// runPrefix is the prefix of this run's lab of kind.
func runPrefix(kind string) string { return lab.RunPrefix(kind, runOwner) }

// labBackends is the number of lab backends (b1..b3).
const labBackends = 3

// Environment passed from the supervising process to the test process it runs.
const (
	envChild  = "SLUICE_E2E_CHILD"  // set in the test process to the supervisor's pid
	envSluice = "SLUICE_E2E_SLUICE" // path of the sluice binary built for the suite
	// envSluiceLab is the path of the sluice-lab binary built for the suite, beside sluice.
	envSluiceLab = "SLUICE_E2E_SLUICE_LAB"
)

var (
	// theLab is the lab every test uses; nil when the suite skips.
	theLab *lab.Lab
	// sluiceBin is the sluice binary under test.
	sluiceBin string
	// sluiceLabBin is the sluice-lab binary under test: the lab's helpers and the benchmarks.
	sluiceLabBin string
	// skipReason says why the suite cannot run here (not root, a tool missing).
	skipReason string
)

// TestMain supervises the suite: when the environment allows it, it builds sluice and sluice-lab, brings the lab
// up (after tearing down those of earlier runs that are gone), runs the tests in a child process (this
// test binary again) and tears the lab down whatever happened to the child: failure, panic,
// -timeout (whose panic runs no cleanups) or a signal. The child only runs the tests.
func TestMain(m *testing.M) {
	if owner, err := strconv.Atoi(os.Getenv(envChild)); err == nil {
		runOwner = owner
		sluiceBin, sluiceLabBin = os.Getenv(envSluice), os.Getenv(envSluiceLab)
		theLab = newLab(sluiceLabBin)
		os.Exit(m.Run())
	}
	flag.Parse()
	if testing.Short() {
		shortRun = true
		os.Exit(m.Run()) // every test skips: the suite takes minutes (make unit)
	}
	if skipReason = missingPrerequisite(); skipReason != "" {
		os.Exit(m.Run()) // every test skips with the reason
	}
	os.Exit(supervise())
}

// shortRun is a run with -short, which leaves the suite out by design.
var shortRun bool

// requireLab skips t when the suite cannot run here.
func requireLab(t *testing.T) {
	t.Helper()
	if shortRun {
		t.Skip("e2e: -short leaves the lab suite out")
	}
	if skipReason != "" {
		testutil.Missing(t, "%s", skipReason)
	}
	if theLab == nil {
		t.Fatal("e2e: no lab (the test process was not started by the suite's TestMain)")
	}
}

func missingPrerequisite() string {
	if os.Geteuid() != 0 {
		return "e2e: needs root (creates network namespaces and nftables rules)"
	}
	for _, bin := range []string{"ip", "nft", "go"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Sprintf("e2e: needs %s: %v", bin, err)
		}
	}
	if _, err := lab.NginxPath(); err != nil {
		return fmt.Sprintf("e2e: needs nginx: %v", err)
	}
	return ""
}

func newLab(sluiceLab string) *lab.Lab {
	l := lab.New(runPrefix(labKind), labBackends)
	// The same hidden responder `sluice-lab up` starts (internal/labcli/lab.go).
	l.UDPResponderCmd = lab.LabUDPResponder(sluiceLab)
	return l
}

// supervise sets up, runs the child and always tears down; it returns the exit status.
func supervise() (code int) {
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "e2e: "+format+"\n", args...) }
	tmp, err := os.MkdirTemp("", "sluice-e2e-")
	if err != nil {
		logf("%v", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	bin, labBin := filepath.Join(tmp, "sluice"), filepath.Join(tmp, "sluice-lab")
	for _, out := range []string{bin, labBin} {
		if err := buildCommand(out); err != nil {
			logf("%v", err)
			return 1
		}
	}
	l := newLab(labBin)

	// Signals stop the child (it shares our process group for terminal signals), never us
	// before the teardown.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	// The digest of failures goes last, after the teardown's lines: the tail of a CI log.
	digest := &failureDigest{}
	defer func() { fmt.Fprint(os.Stderr, digest.String()) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// The fleet lab, if a test built it, and the docs labs if the docs test was killed before
		// its cleanup.
		built := []*lab.Lab{l, newFleetLab(labBin)}
		if docsLabsOwnedBy(runOwner) {
			for _, prefix := range docsLabPrefixes {
				built = append(built, lab.New(prefix, labBackends))
			}
			releaseDocsLabs()
		}
		for _, built := range built {
			if err := built.Down(ctx); err != nil {
				logf("lab %s down: %v", built.Prefix, err)
				code = 1
			}
			if left := namespacesWithPrefix(built.Prefix); len(left) > 0 {
				logf("namespaces left behind: %v", left)
				code = 1
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := lab.TearDownGone(ctx, logf, labKind, fleetKind, benchLBKind, benchNetKind, benchScaleKind, benchFleetKind, benchFloodKind, benchPPSKind); err != nil {
		logf("tearing down the labs of runs that are gone: %v", err)
		return 1
	}
	start := time.Now()
	if err := l.Up(ctx); err != nil {
		logf("lab up: %v", err)
		return 1
	}
	logf("lab %s up and forwarding in %v", l.Prefix, time.Since(start).Round(time.Millisecond))

	child := exec.Command(os.Args[0], os.Args[1:]...)
	child.Env = append(os.Environ(), envChild+"="+strconv.Itoa(runOwner), envSluice+"="+bin, envSluiceLab+"="+labBin)
	child.Stdin, child.Stdout, child.Stderr = nil, io.MultiWriter(os.Stdout, digest), os.Stderr
	if err := child.Start(); err != nil {
		logf("start tests: %v", err)
		return 1
	}
	done := make(chan error, 1)
	go func() { done <- child.Wait() }()
	for {
		select {
		case sig := <-sigs:
			_ = child.Process.Signal(sig)
		case err := <-done:
			var exit *exec.ExitError
			switch {
			case err == nil:
				return 0
			case errors.As(err, &exit) && exit.ExitCode() > 0:
				return exit.ExitCode()
			default:
				logf("tests: %v", err)
				return 1
			}
		}
	}
}

// buildCommand builds the command of the module this package belongs to that out names (./cmd/
// sluice for .../sluice) into out.
func buildCommand(out string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	pkg := "./cmd/" + filepath.Base(out)
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

func moduleRoot() (string, error) {
	if b, err := exec.Command("go", "env", "GOMOD").Output(); err == nil {
		if gomod := strings.TrimSpace(string(b)); gomod != "" && gomod != os.DevNull {
			return filepath.Dir(gomod), nil
		}
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return "", fmt.Errorf("cannot find the module root: %w", err)
	}
	return root, nil
}
