package conntrackd

import (
	"os"
	"testing"
	"time"
)

func TestParseStats(t *testing.T) {
	out, err := os.ReadFile("testdata/stats.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseStats(string(out))
	if err != nil {
		t.Fatal(err)
	}
	want := Stats{Link: "ctdxb", PacketsSent: 4, PacketsReceived: 3, BytesSent: 64, BytesReceived: 116,
		SendErrors: 1, ReceiveErrors: 2, MalformedMessages: 5, LostMessages: 6, Entries: 7,
		InjectCreated: 1, InjectUpdated: 8, InjectDestroyed: 9, InjectFailed: 3}
	if got != want {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if _, err := ParseStats("garbage\n"); err == nil {
		t.Error("parsed output that names no sync link")
	}
}

func FuzzParseStats(f *testing.F) {
	if out, err := os.ReadFile("testdata/stats.txt"); err == nil {
		f.Add(string(out))
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = ParseStats(s)
	})
}

// TestProcessCPU: a process's CPU time is read from /proc, and a process that is gone is an
// error, not 0.
func TestProcessCPU(t *testing.T) {
	deadline := time.Now().Add(50 * time.Millisecond)
	for n := 0; time.Now().Before(deadline); n++ {
		_ = n * n
	}
	if cpu, err := processCPU(os.Getpid()); err != nil || cpu <= 0 {
		t.Errorf("this process's CPU time: %s, %v", cpu, err)
	}
	if _, err := processCPU(1 << 30); err == nil {
		t.Error("a process that does not exist has a CPU time")
	}
}
