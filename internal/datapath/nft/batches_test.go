package nft

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"
)

// TestBatchesKeepServicesWhole runs every transition case, and a VIP handed from one service to
// another, in batches of a few operations: nft (the fake) accepts each transaction, every service
// is wholly before or wholly after between two transactions, and the end is what one transaction
// gives.
func TestBatchesKeepServicesWhole(t *testing.T) {
	dirs, _ := filepath.Glob("testdata/transitions/*")
	cases := map[string][2]string{}
	for _, dir := range dirs {
		cases[filepath.Base(dir)] = [2]string{filepath.Join(dir, "before.yaml"), filepath.Join(dir, "after.yaml")}
	}
	cases["vip-handover"] = [2]string{"testdata/batches/handover-before.yaml", "testdata/batches/handover-after.yaml"}
	cases["from-nothing"] = [2]string{"testdata/batches/empty.yaml", "testdata/batches/handover-after.yaml"}
	cases["to-nothing"] = [2]string{"testdata/batches/handover-before.yaml", "testdata/batches/empty.yaml"}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			before, after := renderFile(t, c[0]), renderFile(t, c[1])
			fake := knftables.NewFake("", "")
			setup := fake.NewTransaction()
			reconcile(setup, newState(), renderFile(t, c[0])) // the fake keeps (and changes) what it is given
			if err := fake.Run(context.Background(), setup); err != nil {
				t.Fatal(err)
			}
			parts := batches(before, after, 3)
			model := contentOf(before)
			for i, part := range parts {
				tx := fake.NewTransaction()
				reconcile(tx, part.have, part.want)
				if err := fake.Run(context.Background(), tx); err != nil {
					t.Fatalf("batch %d of %d rejected: %v\n%s", i+1, len(parts), err, tx)
				}
				model = step(t, model, contentOf(part.have), contentOf(part.want))
				for _, svc := range servicesOf(before, after) {
					got, old, next := owned(model, svc), owned(contentOf(before), svc), owned(contentOf(after), svc)
					if !slices.Equal(got, old) && !slices.Equal(got, next) {
						t.Fatalf("after batch %d of %d, service %s is half changed:\n%v\nbefore: %v\nafter: %v", i+1, len(parts), svc, got, old, next)
					}
				}
			}
			if want := contentOf(after); !slices.Equal(model, want) {
				t.Errorf("the batches end at\n%v\nwant\n%v", model, want)
			}
			fresh := knftables.NewFake("", "")
			full := fresh.NewTransaction()
			reconcile(full, newState(), renderFile(t, c[1]))
			if err := fresh.Run(context.Background(), full); err != nil {
				t.Fatal(err)
			}
			if got, want := sortedLines(fake.Dump()), sortedLines(fresh.Dump()); got != want {
				t.Errorf("batched result differs from a fresh apply:\n%s\n---\n%s", got, want)
			}
		})
	}
}

// TestSmallChangeIsOneBatch: a change within the bound is the one transaction it always was.
func TestSmallChangeIsOneBatch(t *testing.T) {
	before, after := renderFile(t, "testdata/batches/handover-before.yaml"), renderFile(t, "testdata/batches/handover-after.yaml")
	if parts := batches(before, after, maxBatchOperations); len(parts) != 1 || parts[0].have != before || parts[0].want != after {
		t.Fatalf("batches = %d, want the change itself", len(parts))
	}
}

// contentOf lists every object and element of st, one line each, sorted.
func contentOf(st *state) []string {
	var out []string
	for f := range st.tables {
		out = append(out, "table "+string(f))
	}
	for k, c := range st.chains {
		out = append(out, fmt.Sprintf("chain %s %s %q", k.family, k.name, c.rules))
	}
	for k := range st.counters {
		out = append(out, fmt.Sprintf("counter %s %s", k.family, k.name))
	}
	for k, d := range st.sets {
		out = append(out, fmt.Sprintf("set %s %s", k.family, k.name))
		for id := range d.elems {
			out = append(out, fmt.Sprintf("element %s %s %s", k.family, k.name, id))
		}
	}
	slices.Sort(out)
	return out
}

// step is model with what a batch takes away (in from, not in to) removed and what it adds
// added; from must be part of the model.
func step(t *testing.T, model, from, to []string) []string {
	t.Helper()
	have := map[string]bool{}
	for _, l := range model {
		have[l] = true
	}
	for _, l := range from {
		if !have[l] {
			t.Fatalf("a batch starts from %q, which the kernel does not hold", l)
		}
	}
	for _, l := range from {
		if !slices.Contains(to, l) {
			delete(have, l)
		}
	}
	for _, l := range to {
		have[l] = true
	}
	out := make([]string, 0, len(have))
	for l := range have {
		out = append(out, l)
	}
	slices.Sort(out)
	return out
}

// owned is the lines of content that belong to a service.
func owned(content []string, service string) []string {
	var out []string
	for _, l := range content {
		f := strings.Fields(l)
		switch {
		case len(f) >= 3 && serviceOf(f[2]) == service,
			f[0] == "element" && (strings.HasPrefix(f[2], "dispatch") || strings.HasPrefix(f[2], "fullnat-")) && len(f) > 3 && f[3] == service,
			f[0] == "element" && strings.HasPrefix(f[2], "forwarded-") && serviceOf(f[len(f)-1]) == service:
			out = append(out, l)
		}
	}
	return out
}

// servicesOf names the services of the states.
func servicesOf(states ...*state) []string {
	var out []string
	for _, st := range states {
		for k := range st.chains {
			if name, ok := strings.CutPrefix(k.name, "svc-"); ok {
				out = append(out, serviceOf("svc-"+name))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestUnitsJoinServicesSharingAKey: b takes a's VIP and c takes b's, so the three change
// together; d is only removed, so it goes first; keep is unchanged, so it is in no unit.
func TestUnitsJoinServicesSharingAKey(t *testing.T) {
	before, after := renderFile(t, "testdata/batches/handover-before.yaml"), renderFile(t, "testdata/batches/handover-after.yaml")
	var got []string
	for _, u := range changeUnits(before, after) {
		got = append(got, fmt.Sprintf("%v removal=%v", u.services, u.removal))
	}
	want := []string{"[d] removal=true", "[a b c] removal=false"}
	if !slices.Equal(got, want) {
		t.Errorf("units = %q, want %q", got, want)
	}
	if parts := batches(before, after, 3); len(parts) != 4 {
		t.Errorf("%d batches, want 4: the shared objects, d, a+b+c, the shared objects left", len(parts))
	}
}
