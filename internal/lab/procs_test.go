package lab

import (
	"net"
	"os"
	"slices"
	"syscall"
	"testing"
)

// TestThisProcessThroughProc: running, stopped, processGroup and hasUDPSocket read this test
// process as they read the lab's daemons.
func TestThisProcessThroughProc(t *testing.T) {
	pid := os.Getpid()
	if !running(pid, os.Args[0]) || running(pid, "no such marker") {
		t.Errorf("running(%d) does not match its own command line %q", pid, os.Args[0])
	}
	if stopped(pid) || !stopped(1<<22+1) {
		t.Error("stopped: a running process reads as stopped, or a missing one as not")
	}
	pgid, err := syscall.Getpgid(pid)
	if err != nil {
		t.Fatal(err)
	}
	if group, err := processGroup(pgid); err != nil || !slices.Contains(group, pid) {
		t.Errorf("process group %d: %v, %v, want it to hold %d", pgid, group, err, pid)
	}
	if hasUDPSocket(pid) {
		t.Skip("this process already holds a UDP socket")
	}
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !hasUDPSocket(pid) {
		t.Error("a UDP socket this process holds is not found")
	}
}
