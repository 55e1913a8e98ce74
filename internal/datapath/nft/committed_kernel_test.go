package nft

import "testing"

// TestKernelRestoreTrustsOnlyTheSameGeneration: a second datapath in the namespace restores what
// the first committed and applies a change without reading the tables, leaving them as a fresh
// apply would (nothing pending); after anyone else's transaction it refuses, and in another
// namespace the cookie differs.
func TestKernelRestoreTrustsOnlyTheSameGeneration(t *testing.T) {
	var first string
	inFreshNetns(t, func() {
		before, after := loadPlan(t, "testdata/transitions/add-backend/before.yaml"), loadPlan(t, "testdata/transitions/add-backend/after.yaml")
		d := newTestDatapath(t)
		apply(t, d, before)
		c, ok := d.Committed()
		if !ok {
			t.Fatal("the apply's commit is not known")
		}
		first = c.Namespace
		next := newTestDatapath(t)
		if ok, err := next.Restore(c, before); err != nil || !ok {
			t.Fatalf("Restore: %v, %v; want the tables as committed", ok, err)
		}
		apply(t, next, after)
		if n := pending(t, next, after); n != 0 {
			t.Fatalf("%d operations pending after the restored apply", n)
		}
		c, _ = next.Committed()
		runNFT(t, "add table ip other")
		if ok, err := newTestDatapath(t).Restore(c, after); err != nil || ok {
			t.Fatalf("Restore after another transaction: %v, %v; want refused", ok, err)
		}
	})
	inFreshNetns(t, func() {
		if ns, err := namespaceID(); err != nil || ns == first {
			t.Errorf("another namespace is %q (%v), the same as the first", ns, err)
		}
	})
}
