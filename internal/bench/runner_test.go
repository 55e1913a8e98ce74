package bench

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestInterleaveRotatesEveryRound(t *testing.T) {
	var got []string
	err := interleave(4, 3, func(round, item int) error {
		if len(got) <= round {
			got = append(got, "")
		}
		got[round] += string(rune('a' + item))
		return nil
	})
	if err != nil || strings.Join(got, " ") != "abc bca cab abc" {
		t.Errorf("order %v, %v; want abc bca cab abc", got, err)
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
