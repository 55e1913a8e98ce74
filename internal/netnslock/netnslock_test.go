package netnslock

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/testutil"
)

// helperEnv makes the test binary a process that takes the lock in the directory it names,
// says so, and waits to be killed.
const helperEnv = "NETNSLOCK_TEST_HOLD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(helperEnv); dir != "" {
		if _, err := Acquire(dir, "netnslock test helper"); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Println("locked")
		time.Sleep(time.Hour)
	}
	os.Exit(m.Run())
}

func TestSecondWriterIsToldTheHolder(t *testing.T) {
	dir := t.TempDir()
	l, err := Acquire(dir, "sluice serve")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Acquire(dir, "sluice apply")
	var held *HeldError
	if !errors.As(err, &held) {
		t.Fatalf("second Acquire: %v, want a HeldError", err)
	}
	if held.Holder.PID != os.Getpid() || held.Holder.Command != "sluice serve" || held.Holder.Since.IsZero() {
		t.Fatalf("holder %+v, want pid %d, sluice serve and a time", held.Holder, os.Getpid())
	}
	t.Log(err)
	l.Release()
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("Release left %v behind", entries)
	}
	again, err := Acquire(dir, "sluice apply")
	if err != nil {
		t.Fatalf("after Release: %v", err)
	}
	again.Release()
}

func TestKilledHolderFreesTheLock(t *testing.T) {
	dir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "locked\n" {
		t.Fatalf("helper: %q, %v", line, err)
	}
	var held *HeldError
	if _, err := Acquire(dir, "test"); !errors.As(err, &held) || held.Holder.PID != cmd.Process.Pid {
		t.Fatalf("while the helper (pid %d) holds it: %v", cmd.Process.Pid, err)
	}
	if err := cmd.Process.Signal(unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	l, err := Acquire(dir, "test")
	if err != nil {
		t.Fatalf("after kill -9 of the holder: %v", err)
	}
	l.Release()
}

func TestNamespacesHaveTheirOwnLock(t *testing.T) {
	if os.Geteuid() != 0 {
		testutil.Missing(t, "needs root to make a network namespace")
	}
	dir := t.TempDir()
	l, err := Acquire(dir, "host")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	errc := make(chan error, 1)
	go func() {
		// The thread is left locked: it ends with the goroutine and never serves another.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		inner, err := Acquire(dir, "inner")
		if err == nil {
			inner.Release()
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		t.Fatalf("a new namespace's lock while the host's is held: %v", err)
	}
}
