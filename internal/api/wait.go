package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicelb/sluice/internal/engine"
)

// MaxApplyWait bounds how long a change waits for the datapath to apply it; past it the change
// is answered with 504 (it stays the running config and is applied when the datapath can).
const MaxApplyWait = 30 * time.Second

// changeParams are the query parameters of a change. A handler reads them before it changes
// anything: a bad one is answered with 400 and nothing changed.
type changeParams struct {
	dryRun bool // ?dry_run=true: answer what the change would do, and change nothing
	wait   bool // the datapath applied the change before the answer; ?wait=false answers at once
}

// readChangeParams reads ?dry_run and ?wait.
func readChangeParams(r *http.Request) (changeParams, error) {
	dry, err := boolParam(r, "dry_run", false)
	if err != nil {
		return changeParams{}, err
	}
	wait, err := boolParam(r, "wait", true)
	return changeParams{dryRun: dry, wait: wait}, err
}

// waitApplied returns once the datapath holds the running config of generation gen or a later
// one, unless p is not to wait. A failed apply is answered with 500 and its error, no apply
// within MaxApplyWait with 504, a daemon that stopped first with 503: either way the change is
// the running config.
func (s *server) waitApplied(r *http.Request, p changeParams, gen uint64) error {
	if !p.wait || p.dryRun {
		return nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), MaxApplyWait)
	defer cancel()
	err := s.engine.Wait(ctx, gen)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, engine.ErrStopped):
		return &Error{Status: http.StatusServiceUnavailable, Message: "the change is the running config, but " + err.Error() + ": the next start applies the running config, as state.persist keeps it"}
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Status: http.StatusGatewayTimeout, Message: fmt.Sprintf("the change is the running config, but the datapath has not applied it within %s; it keeps trying (see sluice events)", MaxApplyWait)}
	case r.Context().Err() != nil:
		return err
	}
	return &Error{Status: http.StatusInternalServerError, Message: "the change is the running config, but " + err.Error() + "; it is retried (see sluice events)"}
}

// boolParam reads the query parameter name as a boolean; absent, it is def.
func boolParam(r *http.Request, name string, def bool) (bool, error) {
	text := r.URL.Query().Get(name)
	if text == "" {
		return def, nil
	}
	v, err := strconv.ParseBool(text)
	if err != nil {
		return false, invalid(name, "%q is not true or false", text)
	}
	return v, nil
}
