package bench

// The shape every benchmark shares: options checked before anything runs, each error naming its
// flag; the lab brought up and torn down whatever happens; interleaved rounds in orders balanced
// for place and predecessor (a Williams design); medians, ratios and, with --against, per-round
// ratios; a result that is both a table and JSON. A new benchmark is its options with a Check, a
// Run function that measures inside Env.InLab (interleave for rounds), and a result with a Table;
// its command in internal/cli declares the flags and calls benchFlags.run, which checks, prints
// progress, and writes the table and the JSON report.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicelb/sluice/internal/config"
)

// Options are a benchmark's options.
type Options interface {
	// Check reports the first option out of range, naming its flag.
	Check() error
}

// Result is what a benchmark measured: Table renders it for people, the value itself is the
// "results" of the JSON report.
type Result interface {
	Table() string
}

// teardownTimeout bounds a teardown (of the lab, of a path), which also runs after an interrupt.
const teardownTimeout = time.Minute

// InLab brings the lab up, runs fn in it and, unless keep, tears the lab down, also when fn or
// the bring-up fails or ctx ends (an interrupt): the teardown gets a context of its own, bounded
// by teardownTimeout, and its error joins fn's.
func (e *Env) InLab(ctx context.Context, keep bool, fn func() error) (err error) {
	if !keep {
		defer func() {
			e.Progress.Step("tearing down lab %s", e.Lab.Prefix)
			cleanup(ctx, &err, "lab down", e.Lab.Down)
		}()
	}
	e.Progress.Step("bringing up lab %s", e.Lab.Prefix)
	if err := e.Lab.Up(ctx); err != nil {
		return err
	}
	return fn()
}

// cleanup runs fn with a context that survives ctx's end (bounded by teardownTimeout) and
// joins its error, named by what, into *err.
func cleanup(ctx context.Context, err *error, what string, fn func(context.Context) error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
	defer cancel()
	if cerr := fn(cctx); cerr != nil {
		*err = errors.Join(*err, fmt.Errorf("%s: %w", what, cerr))
	}
}

// interleave runs fn for each of n items once per round, for rounds rounds, in the orders of
// williamsOrders: so that neither an item's place in a round nor what ran just before it (the
// TIME_WAIT sockets and timers a faster item leaves behind, for one) favours an item.
func interleave(rounds, n int, fn func(round, item int) error) error {
	orders := williamsOrders(n)
	for r := range rounds {
		for _, item := range orders[r%len(orders)] {
			if err := fn(r, item); err != nil {
				return err
			}
		}
	}
	return nil
}

// williamsOrders are the rows of a Williams design of n items: row i is 0, 1, n-1, 2, n-2, ...
// shifted by i (mod n), and for an odd n the same rows reversed follow. Over all rows each item
// takes each place in a round equally often and follows each other item equally often, where a
// plain rotation has every item always follow the same one.
func williamsOrders(n int) [][]int {
	first := make([]int, n)
	for k := 1; k < n; k++ {
		if k%2 == 1 {
			first[k] = (k + 1) / 2
		} else {
			first[k] = n - k/2
		}
	}
	rows := make([][]int, 0, 2*n+1)
	for shift := range n {
		row := make([]int, n)
		for k, item := range first {
			row[k] = (item + shift) % n
		}
		rows = append(rows, row)
	}
	if n%2 == 1 {
		for _, row := range rows[:n] {
			reversed := slices.Clone(row)
			slices.Reverse(reversed)
			rows = append(rows, reversed)
		}
	}
	if len(rows) == 0 {
		rows = append(rows, nil)
	}
	return rows
}

// roundLabel names round r (0-based) of rounds for progress: "round 1/3".
func roundLabel(r, rounds int) string { return fmt.Sprintf("round %d/%d", r+1, rounds) }

// ratio is a over base, 0 when there is no base (JSON has no infinity).
func ratio(a, base float64) float64 {
	if base <= 0 {
		return 0
	}
	return a / base
}

// pluck maps xs to the figure f picks from each.
func pluck[T any](xs []T, f func(T) float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

// firstError is the first non-nil of errs, so that a Check reads as a list of rules.
func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// checkCount refuses a count flag below least.
func checkCount(flag string, v, least int) error {
	if v < least {
		return fmt.Errorf("--%s: %d is less than %d", flag, v, least)
	}
	return nil
}

// checkDuration refuses a duration flag below least; least 0 asks for a positive duration.
func checkDuration(flag string, d, least time.Duration) error {
	switch {
	case least == 0 && d <= 0:
		return fmt.Errorf("--%s: %s is not positive", flag, d)
	case d < least:
		return fmt.Errorf("--%s: %s is less than %s", flag, d, least)
	}
	return nil
}

// checkDatapaths refuses an empty list, a datapath config does not know or one given twice.
func checkDatapaths(flag string, dps []string) error {
	return checkOneOf(flag, "datapath", dps, config.Datapaths)
}

// checkOneOf refuses an empty list of what, a value not among known, or one given twice.
func checkOneOf[T ~string](flag, what string, given []string, known []T) error {
	names := make([]string, len(known))
	for i, k := range known {
		names[i] = string(k)
	}
	if len(given) == 0 {
		return fmt.Errorf("--%s: none given; known: %s", flag, strings.Join(names, ", "))
	}
	for i, v := range given {
		if !slices.Contains(names, v) {
			return fmt.Errorf("--%s: unknown %s %q; known: %s", flag, what, v, strings.Join(names, ", "))
		}
		if slices.Contains(given[:i], v) {
			return fmt.Errorf("--%s: %s given twice", flag, v)
		}
	}
	return nil
}
