package nft

import (
	"path/filepath"
	"testing"
)

// prevElements are the elements of the web service's prev map in the fake, by key.
func prevElements(t *testing.T, h *fakeHost) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, m := range h.Tables["inet"][TableName].Maps {
		if !isServiceObject(m.Name, prevMap) {
			continue
		}
		for _, e := range m.Elements {
			out[e.Key[0]] = e.Value[0]
		}
	}
	return out
}

// TestSecondChanceKeepsTheFirstChange: a weight goes to 0, back, and to 0 again. The first change
// records each changed slot's backend; the later ones add nothing over a slot the map holds (nft
// 1.0.6 would refuse the transaction): a slot remembers the backend it had before its first
// change within flow_timeout.
func TestSecondChanceKeepsTheFirstChange(t *testing.T) {
	d, h := newFakeDatapath()
	dir := "testdata/transitions/weight-zero"
	before, after := loadPlan(t, filepath.Join(dir, "before.yaml")), loadPlan(t, filepath.Join(dir, "after.yaml"))
	apply(t, d, before)
	if n := len(prevElements(t, h)); n != 0 {
		t.Fatalf("the first apply wrote %d prev elements", n)
	}
	apply(t, d, after)
	first := prevElements(t, h)
	if len(first) == 0 {
		t.Fatal("the change recorded no slot")
	}
	apply(t, d, before)
	apply(t, d, after)
	if got := prevElements(t, h); len(got) != len(first) {
		t.Errorf("after two more changes the prev map holds %v, want the first change's %v", got, first)
	} else {
		for k, v := range first {
			if got[k] != v {
				t.Errorf("slot %s: %s, want the first change's %s", k, got[k], v)
			}
		}
	}
}
