package maglev

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// backends returns n backends with distinct IDs and weight(i) as weight.
func backends(n int, weight func(i int) uint32) []Backend {
	bs := make([]Backend, n)
	for i := range bs {
		bs[i] = Backend{ID: fmt.Sprintf("10.0.%d.%d:80", i/256, i%256), Weight: weight(i)}
	}
	return bs
}

func equal(int) uint32 { return 1 }

func mixed(i int) uint32 { return []uint32{1, 2, 3, 5, 8}[i%5] }

func mustBuild(t testing.TB, bs []Backend, m int) []int {
	t.Helper()
	table, err := Build(bs, m)
	if err != nil {
		t.Fatalf("Build(%d backends, %d): %v", len(bs), m, err)
	}
	return table
}

// owners maps a table to the IDs owning each slot ("" for -1).
func owners(bs []Backend, table []int) []string {
	ids := make([]string, len(table))
	for s, i := range table {
		if i >= 0 {
			ids[s] = bs[i].ID
		}
	}
	return ids
}

// counts returns how many slots each backend owns.
func counts(n int, table []int) []int {
	c := make([]int, n)
	for _, i := range table {
		c[i]++
	}
	return c
}

func TestBuildDeterministic(t *testing.T) {
	bs := backends(37, mixed)
	const m = 4099
	want := owners(bs, mustBuild(t, bs, m))
	if got := owners(bs, mustBuild(t, bs, m)); !slices.Equal(got, want) {
		t.Fatal("two builds of the same input differ")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		shuffled := slices.Clone(bs)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if got := owners(shuffled, mustBuild(t, shuffled, m)); !slices.Equal(got, want) {
			t.Fatal("a shuffled input assigns slots to different IDs")
		}
	}
}

// TestBuildGolden pins the output for a fixed input so that changes to the
// hashes or the fill order, which would make nodes running different versions
// disagree, are noticed.
func TestBuildGolden(t *testing.T) {
	bs := []Backend{
		{ID: "10.0.0.3:80", Weight: 1},
		{ID: "10.0.0.1:80", Weight: 2},
		{ID: "10.0.0.2:80", Weight: 1},
		{ID: "10.0.0.4:80", Weight: 0},
	}
	table := mustBuild(t, bs, 13)
	want := []int{2, 1, 1, 1, 1, 0, 1, 0, 1, 2, 0, 1, 2}
	if !slices.Equal(table, want) {
		t.Errorf("table = %#v, want %#v", table, want)
	}
	table = mustBuild(t, bs, DefaultMinSize)
	wantSlots := map[int]int{0: 1, 1: 2, 2: 0, 100: 0, 333: 1, 512: 1, 777: 0, 1000: 1, 1020: 1}
	for s, i := range wantSlots {
		if table[s] != i {
			t.Errorf("table[%d] = %d, want %d", s, table[s], i)
		}
	}
	if got, want := counts(len(bs), table), []int{255, 511, 255, 0}; !slices.Equal(got, want) {
		t.Errorf("slot counts = %v, want %v", got, want)
	}
}

func TestBuildBalance(t *testing.T) {
	const m = 65537
	for _, n := range []int{3, 10, 37} {
		for _, w := range []struct {
			name   string
			weight func(int) uint32
		}{{"equal", equal}, {"mixed", mixed}} {
			t.Run(fmt.Sprintf("%s/%d", w.name, n), func(t *testing.T) {
				bs := backends(n, w.weight)
				worst := maxRelativeDeviation(bs, counts(n, mustBuild(t, bs, m)))
				t.Logf("worst |share-ideal|/ideal = %.4f%%", 100*worst)
				if worst > 0.01 {
					t.Errorf("worst deviation %.4f%% > 1%%", 100*worst)
				}
			})
		}
	}
}

// maxRelativeDeviation returns the largest |count-ideal|/ideal over bs.
func maxRelativeDeviation(bs []Backend, count []int) float64 {
	var sum float64
	for _, b := range bs {
		sum += float64(b.Weight)
	}
	m := 0
	for _, c := range count {
		m += c
	}
	worst := 0.0
	for i, b := range bs {
		ideal := float64(m) * float64(b.Weight) / sum
		worst = max(worst, math.Abs(float64(count[i])-ideal)/ideal)
	}
	return worst
}

// TestBuildBalanceSkewed checks the bound the credit scheme guarantees for any
// weights. A backend of weight w out of a total S among N backends owns within
// 2 + 2*N*w/S slots of its ideal share M*w/S. For the 1% goal this needs an
// ideal share of a few hundred slots, so a backend whose weight is a tiny
// fraction of the total can deviate more in relative terms (it owns at least
// one slot even when its ideal share is below one).
func TestBuildBalanceSkewed(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	worstSlots, worstRatio := 0.0, 0.0
	for range 50 {
		n := 1 + rng.IntN(60)
		m := NextPrime(n + rng.IntN(20000))
		bs := backends(n, func(int) uint32 { return uint32(rng.IntN(1000)) })
		bs[rng.IntN(n)].Weight = 1 + uint32(rng.IntN(1<<20)) // one heavy backend
		table := mustBuild(t, bs, m)
		count := counts(n, table)
		var sum float64
		active := 0
		for _, b := range bs {
			sum += float64(b.Weight)
			if b.Weight > 0 {
				active++
			}
		}
		for i, b := range bs {
			share := float64(b.Weight) / sum
			ideal := float64(m) * share
			dev, bound := math.Abs(float64(count[i])-ideal), 2+2*float64(active)*share
			worstSlots, worstRatio = max(worstSlots, dev), max(worstRatio, dev/bound)
			if dev > bound {
				t.Errorf("m=%d n=%d weight %d of %v: %d slots, ideal %.2f, deviation %.2f > %.2f",
					m, n, b.Weight, sum, count[i], ideal, dev, bound)
			}
		}
	}
	t.Logf("worst deviation %.2f slots; worst deviation/bound %.2f", worstSlots, worstRatio)
}

// TestBuildRemove checks the disruption caused by removing a backend. All of
// its slots move to the others. As in the paper, Maglev favours balance over
// minimal disruption: the survivors then fill in a different order, so a small
// fraction of their slots move too. That fraction shrinks as M/N grows; at
// M=65537 it stays under 1% of the table.
func TestBuildRemove(t *testing.T) {
	const m = 65537
	for _, n := range []int{5, 10, 50} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			bs := backends(n, equal)
			before := owners(bs, mustBuild(t, bs, m))
			worst := 0.0
			for r := range bs {
				rest := slices.Delete(slices.Clone(bs), r, r+1)
				after := owners(rest, mustBuild(t, rest, m))
				others := 0
				for s := range before {
					switch {
					case after[s] == bs[r].ID:
						t.Fatalf("slot %d still owned by removed %s", s, bs[r].ID)
					case after[s] != before[s] && before[s] != bs[r].ID:
						others++
					}
				}
				worst = max(worst, float64(others)/m)
			}
			t.Logf("worst fraction of other backends' slots moved: %.4f%%", 100*worst)
			if worst > 0.01 {
				t.Errorf("removal moved %.4f%% of the table beyond the removed backend's slots, want <= 1%%", 100*worst)
			}
		})
	}
}

func TestBuildAdd(t *testing.T) {
	const m = 65537
	for _, n := range []int{5, 10, 50} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			bs := backends(n+1, equal)
			after := owners(bs, mustBuild(t, bs, m))
			limit := 1/float64(n+1) + 0.01
			worst := 0.0
			for a := range bs {
				rest := slices.Delete(slices.Clone(bs), a, a+1)
				before := owners(rest, mustBuild(t, rest, m))
				moved := 0
				for s := range before {
					if before[s] != after[s] {
						moved++
					}
				}
				worst = max(worst, float64(moved)/m)
			}
			t.Logf("worst fraction moved: %.4f%% (1/(N+1) = %.4f%%)", 100*worst, 100/float64(n+1))
			if worst > limit {
				t.Errorf("adding a backend moved %.4f%% of the table, want <= %.4f%%", 100*worst, 100*limit)
			}
		})
	}
}

func TestBuildZeroWeightIsRemoval(t *testing.T) {
	const m = 4099
	for _, weight := range []func(int) uint32{equal, mixed} {
		bs := backends(10, weight)
		for r := range bs {
			zeroed := slices.Clone(bs)
			zeroed[r].Weight = 0
			rest := slices.Delete(slices.Clone(bs), r, r+1)
			if got, want := owners(zeroed, mustBuild(t, zeroed, m)), owners(rest, mustBuild(t, rest, m)); !slices.Equal(got, want) {
				t.Fatalf("weight 0 for %s differs from removing it", bs[r].ID)
			}
		}
	}
}

func TestBuildNoActiveBackend(t *testing.T) {
	for _, bs := range [][]Backend{nil, {{ID: "a"}, {ID: "b"}, {ID: "c"}}} {
		table := mustBuild(t, bs, 2)
		if !slices.Equal(table, []int{-1, -1}) {
			t.Errorf("Build(%v, 2) = %v, want all -1", bs, table)
		}
	}
}

func TestBuildErrors(t *testing.T) {
	three := backends(3, equal)
	for _, tc := range []struct {
		name     string
		backends []Backend
		m        int
		want     string
	}{
		{"not prime", three, 1020, "not prime"},
		{"zero", three, 0, "not prime"},
		{"negative", three, -7, "not prime"},
		{"too large", three, NextPrime(MaxSize), "exceeds MaxSize"},
		{"too small", three, 2, "smaller than the 3 backends"},
		{"duplicate", []Backend{{ID: "a", Weight: 1}, {ID: "b", Weight: 1}, {ID: "a", Weight: 2}}, 1021, `duplicate backend ID "a"`},
		{"duplicate weight 0", []Backend{{ID: "a", Weight: 1}, {ID: "a"}}, 1021, `duplicate backend ID "a"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table, err := Build(tc.backends, tc.m)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Build(m=%d) error = %v, want one containing %q", tc.m, err, tc.want)
			}
			if table != nil {
				t.Errorf("Build returned a table along with an error")
			}
		})
	}
	// Backends of weight 0 do not count against the table size.
	bs := []Backend{{ID: "a", Weight: 1}, {ID: "b"}, {ID: "c"}, {ID: "d", Weight: 3}}
	if table := mustBuild(t, bs, 2); len(table) != 2 {
		t.Errorf("len(table) = %d, want 2", len(table))
	}
	if _, err := Build(three, maxPrime); err != nil {
		t.Errorf("Build at the largest size: %v", err)
	}
}

func TestDefaultSize(t *testing.T) {
	for _, tc := range []struct{ n, want int }{{-1, 1021}, {0, 1021}, {3, 1021}, {10, 1021}, {11, 2053}, {20, 2053}, {21, 4091}, {1000, 130693}} {
		if got := DefaultSize(tc.n); got != tc.want {
			t.Errorf("DefaultSize(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
	limit := (maxPrime - 1) / 100
	for n := 0; n <= limit; n += 1 + n/8 {
		if got := DefaultSize(n); !IsPrime(got) || got <= 100*n || got < DefaultMinSize || got > MaxSize {
			t.Errorf("DefaultSize(%d) = %d, want a prime > %d and in [%d, %d]", n, got, 100*n, DefaultMinSize, MaxSize)
		}
	}
	for _, n := range []int{limit + 1, 20000, math.MaxInt} {
		if got := DefaultSize(n); got != maxPrime {
			t.Errorf("DefaultSize(%d) = %d, want the cap %d", n, got, maxPrime)
		}
	}
}

func TestMaxPrime(t *testing.T) {
	if !IsPrime(maxPrime) || maxPrime > MaxSize || NextPrime(maxPrime+1) <= MaxSize {
		t.Errorf("maxPrime %d is not the largest prime <= MaxSize %d", maxPrime, MaxSize)
	}
}

func TestIsPrime(t *testing.T) {
	const n = 200000
	composite := make([]bool, n)
	for i := 2; i < n; i++ {
		if !composite[i] {
			for j := i * i; j < n; j += i {
				composite[j] = true
			}
		}
		if got, want := IsPrime(i), !composite[i]; got != want {
			t.Fatalf("IsPrime(%d) = %v, want %v", i, got, want)
		}
	}
	for _, c := range []struct {
		n    int
		want bool
	}{
		{math.MinInt, false}, {-2, false}, {0, false}, {1, false},
		{1<<24 - 3, true}, {1 << 24, false}, {1<<24 + 43, true},
		{3215031751, false}, // strong pseudoprime to bases 2, 3, 5 and 7
		{1<<31 - 1, true},
		{1000000007 * 1000000009, false},
		{1<<61 - 1, true},
		{math.MaxInt, strconv.IntSize == 32},
	} {
		if got := IsPrime(c.n); got != c.want {
			t.Errorf("IsPrime(%d) = %v, want %v", c.n, got, c.want)
		}
	}
}

func TestNextPrime(t *testing.T) {
	for _, tc := range []struct{ n, want int }{
		{math.MinInt, 2}, {0, 2}, {2, 2}, {3, 3}, {4, 5}, {14, 17}, {1021, 1021}, {1022, 1031}, {2001, 2003}, {65536, 65537},
	} {
		if got := NextPrime(tc.n); got != tc.want {
			t.Errorf("NextPrime(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("NextPrime(math.MaxInt) did not panic")
		}
	}()
	NextPrime(math.MaxInt)
}

// FuzzBuild decodes data as m (2 bytes) followed by (id, weight) byte pairs
// and checks Build's error conditions and the table's invariants.
func FuzzBuild(f *testing.F) {
	f.Add([]byte{13, 0, 1, 1, 2, 1, 3, 1})
	f.Add([]byte{0xfd, 0x03, 1, 1, 2, 2, 3, 3, 4, 5, 5, 8})
	f.Add([]byte{3, 0, 1, 1, 2, 0, 3, 0, 4, 255})
	f.Add([]byte{2, 0, 1, 1, 2, 1, 3, 1})
	f.Add([]byte{100, 0, 7, 1, 7, 2})
	f.Add([]byte{0x0b, 0x01, 9, 0, 10, 0})
	f.Add([]byte{0x11, 0x00, 1, 255, 2, 1, 3, 1, 4, 1, 5, 1, 6, 1, 7, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		m := int(data[0]) | int(data[1])<<8
		var bs []Backend
		for p := data[2:]; len(p) >= 2 && len(bs) < 32; p = p[2:] {
			// A small ID alphabet so that duplicates occur; varied weights.
			bs = append(bs, Backend{ID: "b" + strconv.Itoa(int(p[0]%40)), Weight: uint32(p[1]) * uint32(p[1]) % 1000})
		}
		active, dup := 0, false
		seen := map[string]bool{}
		for _, b := range bs {
			dup = dup || seen[b.ID]
			seen[b.ID] = true
			if b.Weight > 0 {
				active++
			}
		}

		table, err := Build(bs, m)
		if wantErr := !IsPrime(m) || dup || active > m; (err != nil) != wantErr {
			t.Fatalf("Build(%v, %d) error = %v, want error: %v", bs, m, err, wantErr)
		}
		if err != nil {
			return
		}
		if len(table) != m {
			t.Fatalf("len(table) = %d, want %d", len(table), m)
		}
		owned := make([]int, len(bs))
		for s, i := range table {
			switch {
			case i == -1 && active == 0:
			case i < 0 || i >= len(bs):
				t.Fatalf("table[%d] = %d, not an index of %d backends", s, i, len(bs))
			case bs[i].Weight == 0:
				t.Fatalf("table[%d] = %d, a backend of weight 0", s, i)
			default:
				owned[i]++
			}
		}
		for i, b := range bs {
			if b.Weight > 0 && owned[i] == 0 {
				t.Fatalf("backend %d %v owns no slot", i, b)
			}
		}

		again := mustBuild(t, bs, m)
		if !slices.Equal(table, again) {
			t.Fatal("two builds of the same input differ")
		}
		reversed := slices.Clone(bs)
		slices.Reverse(reversed)
		if !slices.Equal(owners(bs, table), owners(reversed, mustBuild(t, reversed, m))) {
			t.Fatal("reversed input assigns slots to different IDs")
		}
	})
}

func BenchmarkBuild(b *testing.B) {
	for _, bc := range []struct{ m, n int }{{1021, 3}, {65537, 100}} {
		b.Run(fmt.Sprintf("M=%d/N=%d", bc.m, bc.n), func(b *testing.B) {
			bs := backends(bc.n, equal)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Build(bs, bc.m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
