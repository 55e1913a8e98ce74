package nft

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/sluicelb/sluice/internal/plan"
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

// TestResetFlowsForgetsSecondChance: a dsr backend whose flows are reset (on_failure: reset)
// loses its prev map elements too: its connections must break, not come back by second chance.
// (dsr: the fake's flow map stands for the kernel; a nat reset would drop the host's conntrack.)
func TestResetFlowsForgetsSecondChance(t *testing.T) {
	d, h := newFakeDatapath()
	dir := t.TempDir()
	write := func(name, weight string) *plan.Plan {
		path := filepath.Join(dir, name)
		yaml := "services:\n  - name: web\n    vip: 10.91.9.102\n    port: 80\n    mode: dsr\n    table_size: 7\n" +
			"    backends:\n      - address: 10.91.2.11\n      - address: 10.91.2.12\n      - address: 10.91.2.13\n        weight: " + weight + "\n"
		if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		return loadPlan(t, path)
	}
	apply(t, d, write("before.yaml", "1"))
	after := write("after.yaml", "0")
	apply(t, d, after)
	held := prevValues(h, knftables.NetDevFamily)
	if len(held) == 0 {
		t.Fatal("the weight change recorded no slot")
	}
	svc := &after.Services[0]
	gone := svc.Backends[2]
	if _, err := d.ResetFlows(context.Background(), svc, gone); err != nil {
		t.Fatal(err)
	}
	mark := strconv.FormatUint(uint64(backendMarks(svc.Backends)[2]), 10)
	if left := prevValues(h, knftables.NetDevFamily); slices.Contains(left, mark) || len(left) != len(held)-count(held, mark) {
		t.Errorf("after the reset of %s the prev map holds %v (was %v): its mark %s should be gone, and only it", gone.ID(), left, held, mark)
	}
}

// prevValues are the values of every prev map of family f in the fake.
func prevValues(h *fakeHost, f knftables.Family) []string {
	var out []string
	if t := h.Tables[f][TableName]; t != nil {
		for _, m := range t.Maps {
			if isServiceObject(m.Name, prevMap) {
				for _, e := range m.Elements {
					out = append(out, e.Value[0])
				}
			}
		}
	}
	return out
}

func count(list []string, v string) int {
	n := 0
	for _, x := range list {
		if x == v {
			n++
		}
	}
	return n
}
