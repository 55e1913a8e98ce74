package maglev

import (
	"slices"
	"testing"
)

// TestRememberTakesTheTablesGiven has Build take a table handed to Remember by its inputs instead
// of building it, keep the ones it built or took for Remembered, and build one whose packed
// table does not fit its inputs.
func TestRememberTakesTheTablesGiven(t *testing.T) {
	t.Cleanup(Forget)
	backends := []Backend{{ID: "10.0.0.1:80", Weight: 1}, {ID: "10.0.0.2:80", Weight: 2}}
	Remember(nil)
	built, err := Build(backends, 1021)
	if err != nil {
		t.Fatal(err)
	}
	key := Key(backends, 1021)
	if got := Remembered()[key]; !slices.Equal(got, Pack(built)) {
		t.Fatalf("Build kept %v for %s, want the table it built", got, key)
	}
	given := slices.Repeat([]int{1}, 1021) // not what Build makes: proves it was taken
	other := []Backend{{ID: "10.0.0.3:80", Weight: 1}}
	Remember(map[string][]byte{key: Pack(given), Key(other, 61): Pack(slices.Repeat([]int{5}, 61))})
	if got, err := Build(backends, 1021); err != nil || !slices.Equal(got, given) {
		t.Errorf("Build after Remember: %v, %v; want the table given", got, err)
	}
	if got, err := Build(other, 61); err != nil || !slices.Equal(got, slices.Repeat([]int{0}, 61)) {
		t.Errorf("Build of a table given with an index out of range: %v, %v; want it built", got, err)
	}
	if got := Remembered(); len(got) != 2 || !slices.Equal(got[key], Pack(given)) {
		t.Errorf("Remembered %d tables, want the 2 Build took or built", len(got))
	}
}

// TestPackRoundTrips packs tables of one-byte and longer slots, and "no backend".
func TestPackRoundTrips(t *testing.T) {
	for _, table := range [][]int{{0, 1, 2}, {-1, -1}, {300, 0, 127, 128}} {
		got, ok := Unpack(Pack(table), 301)
		if !ok || !slices.Equal(got, table) {
			t.Errorf("Unpack(Pack(%v)) = %v, %v", table, got, ok)
		}
	}
	if _, ok := Unpack(Pack([]int{3}), 3); ok {
		t.Error("Unpack took an index past the backends")
	}
}

// TestRememberSharesOneTable: after Remember, Builds of the same inputs return one table, built
// once or unpacked once (10,000 services of the same backends), and Forget stops it.
func TestRememberSharesOneTable(t *testing.T) {
	t.Cleanup(Forget)
	backends := []Backend{{ID: "10.0.0.1:80", Weight: 1}, {ID: "10.0.0.2:80", Weight: 1}}
	other := []Backend{{ID: "10.0.0.3:80", Weight: 1}}
	Remember(map[string][]byte{Key(other, 61): Pack(slices.Repeat([]int{0}, 61))})
	a, _ := Build(backends, 61)
	b, _ := Build(backends, 61)
	if &a[0] != &b[0] {
		t.Error("two Builds of the same inputs built two tables")
	}
	c, _ := Build(other, 61)
	d, _ := Build(other, 61)
	if &c[0] != &d[0] {
		t.Error("two Builds of a table given unpacked it twice")
	}
	Forget()
	e, _ := Build(backends, 61)
	if &e[0] == &a[0] || !slices.Equal(e, a) {
		t.Error("after Forget, Build returned a remembered table, or another one")
	}
}
