// Package netnstest runs test code in network namespaces of its own: unnamed, so the kernel
// removes each with its last reference and a failed or timed-out test leaves nothing behind.
package netnstest

import (
	"os"
	"runtime"
	"testing"

	"github.com/vishvananda/netns"

	"github.com/sluicelb/sluice/internal/testutil"
)

// Run runs fn on a thread switched into a new, empty network namespace, and switches the thread
// back afterwards. It skips the test without root.
func Run(t testing.TB, fn func()) {
	t.Helper()
	In(t, New(t), fn)
}

// New returns a new, empty network namespace, closed when the test ends; the caller stays where
// it is. It skips the test without root.
func New(t testing.TB) netns.NsHandle {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.Missing(t, "needs root: creates a network namespace")
	}
	var ns netns.NsHandle
	switched(t, func() (err error) {
		ns, err = netns.New() // switches the thread into it
		return err
	}, func() {})
	t.Cleanup(func() { ns.Close() })
	return ns
}

// In runs fn on the calling goroutine's thread switched into ns, and switches it back afterwards.
func In(t testing.TB, ns netns.NsHandle, fn func()) {
	t.Helper()
	switched(t, func() error { return netns.Set(ns) }, fn)
}

// switched runs fn on the calling goroutine's thread once enter has switched the thread to
// another namespace, and switches it back afterwards.
func switched(t testing.TB, enter func() error, fn func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	if err := enter(); err != nil {
		t.Fatal(err)
	}
	defer back(orig)
	fn()
}

// Enter moves the calling goroutine, locked to its thread, into ns until the test ends.
func Enter(t testing.TB, ns netns.NsHandle) {
	t.Helper()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	if err := netns.Set(ns); err != nil {
		orig.Close()
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		back(orig)
		runtime.UnlockOSThread()
		orig.Close()
	})
}

// EnterNew moves the calling goroutine, locked to its thread, into a new, empty network namespace
// until the test ends, and returns it. It skips the test without root.
func EnterNew(t testing.TB) netns.NsHandle {
	t.Helper()
	ns := New(t)
	Enter(t, ns)
	return ns
}

// back switches the thread back to orig; a thread must never stay in a test namespace.
func back(orig netns.NsHandle) {
	if err := netns.Set(orig); err != nil {
		panic(err)
	}
}
