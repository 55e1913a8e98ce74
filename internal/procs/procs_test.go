package procs

import (
	"maps"
	"slices"
	"testing"

	"github.com/prometheus/procfs"
)

// fixture is a fake /proc: init (1), a keepalived group 100 (its leader, whose name holds a
// parenthesis, a zombie 101 and a stopped 102), bird (200), and 300, which exited while listed.
func fixture(t *testing.T) procfs.FS {
	t.Helper()
	fs, err := procfs.NewFS("testdata/proc")
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

func pids(stats []procfs.ProcStat) []int {
	var out []int
	for _, st := range stats {
		out = append(out, st.PID)
	}
	slices.Sort(out)
	return out
}

func TestStatsLeavesOutTheExited(t *testing.T) {
	stats, err := Stats(fixture(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := pids(stats); !slices.Equal(got, []int{1, 100, 101, 102, 200}) {
		t.Errorf("pids %v, want 1 100 101 102 200", got)
	}
	for _, st := range stats {
		if st.PID == 100 && (st.Comm != "keep (alived)" || st.PPID != 1 || st.UTime != 1000 || st.STime != 234) {
			t.Errorf("pid 100 read as %+v", st)
		}
	}
}

func TestGroup(t *testing.T) {
	group, err := Group(fixture(t), 100)
	if err != nil {
		t.Fatal(err)
	}
	if got := pids(group); !slices.Equal(got, []int{100, 101, 102}) {
		t.Errorf("group 100: %v, want 100 101 102 (the zombie too)", got)
	}
	if none, err := Group(fixture(t), 7); err != nil || len(none) != 0 {
		t.Errorf("group 7: %v, %v, want none", none, err)
	}
	if _, err := Group(procfs.FS{}, 1); err == nil {
		t.Error("a /proc that cannot be listed read without an error")
	}
}

func TestSocketInodes(t *testing.T) {
	p, err := fixture(t).Proc(100)
	if err != nil {
		t.Fatal(err)
	}
	inodes, err := SocketInodes(p)
	if err != nil {
		t.Fatal(err)
	}
	// fd 4 is a file, 6 a pipe, 7 a malformed link: only 3 and 5 are sockets.
	if got := slices.Sorted(maps.Keys(inodes)); !slices.Equal(got, []uint64{777, 4242}) {
		t.Errorf("socket inodes %v, want 777 4242", got)
	}
	gone, err := fixture(t).Proc(300)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := SocketInodes(gone); err == nil {
		t.Error("a process without fd/ read without an error")
	}
}
