package nft

import (
	"strings"
	"testing"
	"time"
)

// TestKernelWatchReportsOnlyOthersChanges: Sluice's own transactions go unreported; someone
// else's deletion of its table is reported, naming it and who did it, without a resync.
func TestKernelWatchReportsOnlyOthersChanges(t *testing.T) {
	inFreshNetns(t, func() {
		d, reports := watched(t)
		apply(t, d, loadPlan(t, "testdata/transitions/add-service/before.yaml"))
		apply(t, d, loadPlan(t, "testdata/transitions/add-service/after.yaml")) // adds a service
		runNFT(t, "delete table inet sluice")
		for {
			what := waitReport(t, reports)
			if strings.Contains(what, "added") {
				t.Fatalf("Sluice's own transaction was reported: %s", what)
			}
			if strings.Contains(what, "table inet sluice deleted") {
				if !strings.Contains(what, "nft (pid ") {
					t.Errorf("the report does not name who made the change: %s", what)
				}
				return
			}
		}
	})
}

// TestKernelWatchReportsChangesToSluiceTablesOnly: a script of changes by others, each its own
// transaction, is reported (a burst in one report, the next burst in another); a change to
// another table is not.
func TestKernelWatchReportsChangesToSluiceTablesOnly(t *testing.T) {
	inFreshNetns(t, func() {
		d, reports := watched(t)
		apply(t, d, loadPlan(t, "testdata/transitions/add-service/after.yaml"))
		runNFT(t, "delete element inet sluice dispatch-port4 { udp . 10.91.9.100 . 53 }")
		runNFT(t, "add table inet someone-else")
		runNFT(t, "delete table inet sluice")
		var seen string
		for !strings.Contains(seen, "elements of set inet sluice dispatch-port4 deleted") || !strings.Contains(seen, "table inet sluice deleted") {
			seen += waitReport(t, reports) + "\n"
		}
		if strings.Contains(seen, "someone-else") {
			t.Errorf("reports %q name a table not Sluice's", seen)
		}
	})
}

// TestKernelWatchJudgesLostNotificationsByGeneration: Sluice's own transactions that overflow the
// notification socket (here a tiny one; in production one with tens of thousands of elements) are
// not reported as changes by others; once someone else commits, the loss is reported.
func TestKernelWatchJudgesLostNotificationsByGeneration(t *testing.T) {
	inFreshNetns(t, func() {
		d := newTestDatapath(t)
		reports := make(chan string, 16)
		if err := d.watch(t.Context(), func(what string) { reports <- what }, 1); err != nil {
			t.Fatal(err)
		}
		apply(t, d, loadPlan(t, "testdata/transitions/add-service/before.yaml"))
		apply(t, d, loadPlan(t, "testdata/transitions/add-service/after.yaml"))
		select {
		case what := <-reports:
			t.Fatalf("Sluice's own transactions were reported: %s", what)
		case <-time.After(4 * watchSettle): // a report comes watchSettle after the loss
		}
		runNFT(t, "delete table inet sluice")
		if what := waitReport(t, reports); !strings.Contains(what, "table inet sluice deleted") && !strings.Contains(what, "lost") {
			t.Errorf("someone else's change was reported as %q", what)
		}
	})
}

// watched is a datapath whose watcher runs until the test ends, and the channel of its reports.
func watched(t *testing.T) (*Datapath, <-chan string) {
	t.Helper()
	d := newTestDatapath(t)
	reports := make(chan string, 16)
	if err := d.Watch(t.Context(), func(what string) { reports <- what }); err != nil {
		t.Fatal(err)
	}
	return d, reports
}

func waitReport(t *testing.T, reports <-chan string) string {
	t.Helper()
	select {
	case what := <-reports:
		return what
	case <-time.After(10 * time.Second):
		t.Fatal("no report of the change within 10s")
		return ""
	}
}
