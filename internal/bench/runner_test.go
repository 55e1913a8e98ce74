package bench

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestInterleaveFollowsWilliamsOrders(t *testing.T) {
	var got []string
	err := interleave(7, 3, func(round, item int) error {
		if len(got) <= round {
			got = append(got, "")
		}
		got[round] += string(rune('a' + item))
		return nil
	})
	if want := "abc bca cab cba acb bac abc"; err != nil || strings.Join(got, " ") != want {
		t.Errorf("order %v, %v; want %s", got, err, want)
	}
}

func TestWilliamsOrdersBalancePlaceAndPredecessor(t *testing.T) {
	for n := 1; n <= 8; n++ {
		rows := williamsOrders(n)
		if want := map[bool]int{true: n, false: 2 * n}[n%2 == 0]; len(rows) != want {
			t.Fatalf("n=%d: %d rows, want %d", n, len(rows), want)
		}
		places, follows := map[[2]int]int{}, map[[2]int]int{}
		for _, row := range rows {
			seen := map[int]bool{}
			for k, item := range row {
				if item < 0 || item >= n || seen[item] {
					t.Fatalf("n=%d: row %v is not a permutation", n, row)
				}
				seen[item] = true
				places[[2]int{k, item}]++
				if k > 0 {
					follows[[2]int{row[k-1], item}]++
				}
			}
		}
		perPlace, perPair := len(rows)/n, len(rows)/n // each item once (even n) or twice (odd n) in every place and after every other item
		for k := range n {
			for item := range n {
				if places[[2]int{k, item}] != perPlace {
					t.Errorf("n=%d: item %d takes place %d %d times, want %d", n, item, k, places[[2]int{k, item}], perPlace)
				}
				if item != k && n > 1 && follows[[2]int{k, item}] != perPair {
					t.Errorf("n=%d: item %d follows %d %d times, want %d", n, item, k, follows[[2]int{k, item}], perPair)
				}
			}
		}
	}
}

func TestInterleaveStopsAtTheFirstError(t *testing.T) {
	stop := errors.New("stop")
	calls := 0
	err := interleave(3, 3, func(round, item int) error {
		calls++
		if round == 1 && item == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || calls != 5 {
		t.Errorf("err %v after %d calls, want stop after 5", err, calls)
	}
}

func TestRatioOfZero(t *testing.T) {
	if r := ratio(1, 0); r != 0 {
		t.Errorf("ratio(1, 0) = %v, want 0", r)
	}
	if r := ratio(3, 2); r != 1.5 {
		t.Errorf("ratio(3, 2) = %v, want 1.5", r)
	}
}

// Every benchmark's Check names the flag of the option out of range.
func TestChecksNameTheFlag(t *testing.T) {
	tests := []struct {
		opts Options
		flag string
	}{
		{LBOptions{Duration: 0, Rounds: 1, Rate: 1}, "--duration"},
		{LBOptions{Duration: time.Second, Rounds: 0, Rate: 1}, "--rounds"},
		{LBOptions{Duration: time.Second, Rounds: 1, Rate: 0}, "--rate"},
		{NetOptions{Duration: -time.Second, Rounds: 1}, "--duration"},
		{NetOptions{Duration: time.Second, Rounds: 0}, "--rounds"},
		{ScaleOptions{Datapaths: []string{"ipvs"}}, "--datapath"},
		{ScaleOptions{Datapaths: []string{"nft", "nft"}}, "--datapath"},
		{ScaleOptions{Datapaths: []string{"nft"}, Services: []int{1}, BackendsPerService: 1, Reps: 0}, "--reps"},
		{ScaleOptions{Datapaths: []string{"nft"}, Services: []int{1}, BackendsPerService: 1, Reps: 1, Rounds: 1, Limit: time.Minute, Load: 0}, "--duration"},
		{ScaleOptions{Datapaths: []string{"nft"}, Services: []int{1}, BackendsPerService: 1, Reps: 1, Rounds: 1, Limit: 2 * time.Second, Load: time.Second}, "--limit"},
		{ScaleOptions{Datapaths: []string{"nft"}, Services: []int{0}, BackendsPerService: 1, Reps: 1, Rounds: 1, Limit: time.Minute, Load: time.Second}, "--services"},
	}
	for _, tt := range tests {
		if err := tt.opts.Check(); err == nil || !strings.HasPrefix(err.Error(), tt.flag+":") {
			t.Errorf("%+v: err %v, want one naming %s", tt.opts, err, tt.flag)
		}
	}
	for _, ok := range []Options{
		LBOptions{Duration: time.Second, Rounds: 1, Rate: 1},
		NetOptions{Duration: time.Millisecond, Rounds: 1},
	} {
		if err := ok.Check(); err != nil {
			t.Errorf("%+v refused: %v", ok, err)
		}
	}
}
