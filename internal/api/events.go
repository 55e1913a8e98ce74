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
	return respond(w, http.StatusOK, orEmpty(s.engine.WaitEvents(ctx, since)))
}
