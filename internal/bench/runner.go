package bench

// The shape every benchmark shares: options checked before anything runs, each error naming its
// flag; the lab brought up and torn down whatever happens; interleaved rounds in an order rotated
// per round; medians and ratios; a result that is both a table and JSON. A new benchmark is its
// options with a Check, a Run function that measures inside Env.InLab (interleave for rounds),
// and a result with a Table; its command in internal/cli declares the flags and calls
// benchFlags.run, which checks, prints progress, and writes the table and the JSON report.

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

// interleave runs fn for each of n items once per round, for rounds rounds, the order rotated by
// one every round (round r starts at item r mod n) so that no item is always measured first.
func interleave(rounds, n int, fn func(round, item int) error) error {
	for r := range rounds {
		for k := range n {
			if err := fn(r, (k+r)%n); err != nil {
				return err
			}
		}
	}
	return nil
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
