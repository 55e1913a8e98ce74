// Package netnstest runs test code in a network namespace of its own: unnamed, so the kernel
// removes it with its last reference and a failed or timed-out test leaves nothing behind.
package netnstest

import (
	"os"
	"runtime"
	"testing"

	"github.com/vishvananda/netns"
)

// Run runs fn on a thread switched into a new, empty network namespace, and switches the thread
// back afterwards. It skips the test without root.
func Run(t testing.TB, fn func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a network namespace")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.New() // switches the thread into it
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic(err) // never leave the thread in the test namespace
		}
		ns.Close()
	}()
	fn()
}
