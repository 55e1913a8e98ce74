package nft

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/knftables"
)

// onSameHost is a second datapath on h, as the next one-shot command makes.
func onSameHost(h *fakeHost) *Datapath {
	return newDatapath(h, fakeFlows{h}, h, slog.New(slog.DiscardHandler))
}

// TestRestoreRunsOnlyTheChange commits each transition's before plan with one datapath, restores
// it in another, as the next `sluice apply -f` does: that one applies the after plan with the
// transaction of tx.nft alone, without reading the tables back, and knows what it committed.
func TestRestoreRunsOnlyTheChange(t *testing.T) {
	dirs, _ := filepath.Glob("testdata/transitions/*")
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			first, h := newFakeDatapath()
			h.ns = "boot/1"
			before, after := loadPlan(t, filepath.Join(dir, "before.yaml")), loadPlan(t, filepath.Join(dir, "after.yaml"))
			apply(t, first, before)
			c, ok := first.Committed()
			if !ok {
				t.Fatal("the first apply's commit is not known")
			}
			next := onSameHost(h)
			if ok, err := next.Restore(c, before); err != nil || !ok {
				t.Fatalf("Restore: %v, %v; want the tables as committed", ok, err)
			}
			reads, runs := h.reads, h.runs
			apply(t, next, after)
			if h.reads != reads || h.runs != runs+1 {
				t.Errorf("the change read the tables %d times and ran %d transactions, want 0 and 1", h.reads-reads, h.runs-runs)
			}
			want, err := os.ReadFile(filepath.Join(dir, "tx.nft"))
			if err != nil {
				t.Fatal(err)
			}
			if got := h.LastTransaction.String(); got != string(want) {
				t.Errorf("the change ran\n%s\nwant tx.nft\n%s", got, want)
			}
			if got, want := sortedLines(h.Dump()), fresh(t, after, testEnv); got != want {
				t.Errorf("the tables differ from a fresh apply:\n%s\n---\n%s", got, want)
			}
			if c, ok := next.Committed(); !ok || c.Generation != h.gen {
				t.Errorf("after the change: committed %+v, %v; want generation %d", c, ok, h.gen)
			}
		})
	}
}

// TestRestoreRefusesAnotherState refuses what was committed once the tables may differ from it:
// another transaction since, or another namespace or boot. The next Apply then reads the tables
// and still reaches the plan.
func TestRestoreRefusesAnotherState(t *testing.T) {
	dir := "testdata/transitions/add-backend"
	for name, change := range map[string]func(h *fakeHost){
		"another transaction": func(h *fakeHost) {
			tx := h.NewTransaction()
			tx.Add(&knftables.Table{Family: knftables.InetFamily, Name: TableName}) // changes nothing, but is a transaction
			if err := h.Run(context.Background(), tx); err != nil {
				t.Fatal(err)
			}
		},
		"another namespace": func(h *fakeHost) { h.ns = "boot/2" },
	} {
		t.Run(name, func(t *testing.T) {
			first, h := newFakeDatapath()
			h.ns = "boot/1"
			before, after := loadPlan(t, filepath.Join(dir, "before.yaml")), loadPlan(t, filepath.Join(dir, "after.yaml"))
			apply(t, first, before)
			c, _ := first.Committed()
			change(h)
			next := onSameHost(h)
			if ok, err := next.Restore(c, before); err != nil || ok {
				t.Fatalf("Restore: %v, %v; want refused", ok, err)
			}
			reads := h.reads
			apply(t, next, after)
			if h.reads == reads {
				t.Error("the apply trusted a refused commit: it did not read the tables")
			}
			if got, want := sortedLines(h.Dump()), fresh(t, after, testEnv); got != want {
				t.Errorf("the tables differ from a fresh apply:\n%s\n---\n%s", got, want)
			}
		})
	}
}
