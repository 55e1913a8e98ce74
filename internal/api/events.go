package api

import (
	"context"
	"net/http"
	"strconv"
	"time"
)

// MaxEventWait bounds the long poll of GET /v1/events.
const MaxEventWait = time.Minute

// events answers the events after ?since=ID; with ?wait=DURATION it waits for the first one
// that long, then answers [] when none came.
func (s *server) events(w http.ResponseWriter, r *http.Request) error {
	query := r.URL.Query()
	var since uint64
	if text := query.Get("since"); text != "" {
		id, err := strconv.ParseUint(text, 10, 64)
		if err != nil {
			return invalid("since", "%q is not an event ID", text)
		}
		since = id
	}
	var wait time.Duration
	if text := query.Get("wait"); text != "" {
		d, err := time.ParseDuration(text)
		if err != nil || d < 0 || d > MaxEventWait {
			return invalid("wait", "%q is not a duration of at most %s (like 30s)", text, MaxEventWait)
		}
		wait = d
	}
	if wait == 0 {
		return respond(w, http.StatusOK, orEmpty(s.engine.Events(since)))
	}
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	defer untilShutdown(r, cancel)()
	return respond(w, http.StatusOK, orEmpty(s.engine.WaitEvents(ctx, since)))
}

// shutdownKey keys, in a request's context, the context NewServer cancels when it shuts down.
type shutdownKey struct{}

// untilShutdown calls cancel when the server that received r shuts down, so that a long poll
// answers what it has then instead of holding the shutdown up; the function it returns stops that.
func untilShutdown(r *http.Request, cancel context.CancelFunc) (stop func() bool) {
	stopping, ok := r.Context().Value(shutdownKey{}).(context.Context)
	if !ok {
		return func() bool { return false } // served by a server NewServer did not make
	}
	return context.AfterFunc(stopping, cancel)
}
