package lab

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestTearDownGoneLeavesLiveRunsLabs: of two labs named after their owner, the one of a process
// that is gone is torn down and the one of a running process (this one) is left alone.
func TestTearDownGoneLeavesLiveRunsLabs(t *testing.T) {
	needRoot(t)
	const kind = "sltestown"
	ended := exec.Command("true")
	if err := ended.Run(); err != nil {
		t.Fatal(err)
	}
	gone, live := RunPrefix(kind, ended.Process.Pid), RunPrefix(kind, os.Getpid())
	for _, prefix := range []string{gone, live} {
		l := New(prefix, 1)
		t.Cleanup(func() { _ = l.Down(context.Background()) })
		if err := createNS(l.BalancerNS()); err != nil {
			t.Fatal(err)
		}
	}
	labs, err := RunLabs(kind)
	if err != nil {
		t.Fatal(err)
	}
	want := []RunLab{{gone, ended.Process.Pid, false}, {live, os.Getpid(), true}}
	slices.SortFunc(want, func(a, b RunLab) int { return strings.Compare(a.Prefix, b.Prefix) })
	if !slices.Equal(labs, want) {
		t.Fatalf("RunLabs = %v, want %v", labs, want)
	}
	var logged []string
	logf := func(format string, args ...any) { logged = append(logged, format) }
	if err := TearDownGone(context.Background(), logf, kind); err != nil {
		t.Fatal(err)
	}
	if labs, _ := RunLabs(kind); !slices.Equal(labs, []RunLab{{live, os.Getpid(), true}}) {
		t.Errorf("after TearDownGone: %v, want only the live run's lab", labs)
	}
	if len(logged) != 2 {
		t.Errorf("logged %d lines, want one per lab", len(logged))
	}
}
