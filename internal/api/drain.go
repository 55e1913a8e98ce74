package api

import (
	"bytes"
	"cmp"
	"net/http"
	"slices"
	"time"

	"github.com/sluicelb/sluice/internal/engine"
)

// MaxDrainTimeout bounds the timeout of a drain.
const MaxDrainTimeout = 24 * time.Hour

// drain sets a backend's weight to 0 and follows its flows (engine.Drain); 202 with the drain.
// A dry run answers what setting the weight to 0 would change.
func (s *server) drain(w http.ResponseWriter, r *http.Request) error {
	name, ref := r.PathValue("name"), r.PathValue("backend")
	p, err := readChangeParams(r)
	if err != nil {
		return err
	}
	timeout, err := drainTimeout(r)
	if err != nil {
		return err
	}
	if p.dryRun {
		change, _, err := s.setWeight(r, p, name, ref, 0)
		if err != nil {
			return err
		}
		return respondChange(w, change)
	}
	// Resolve the backend first: the engine answers a malformed reference with a plain error.
	if _, _, err := lookupBackend(s.engine.Config(), name, ref); err != nil {
		return err
	}
	view, err := s.engine.Drain(r.Context(), name, ref, timeout)
	if err != nil {
		return err
	}
	if err := s.waitApplied(r, p, s.engine.Generation()); err != nil {
		return err
	}
	return respond(w, http.StatusAccepted, view)
}

// drainTimeout reads the optional body {"timeout": "5m"}; 0 means engine.DefaultDrainTimeout.
func drainTimeout(r *http.Request) (time.Duration, error) {
	data, _, err := readBody(r, mediaJSON)
	if err != nil || len(bytes.TrimSpace(data)) == 0 {
		return 0, err
	}
	var body drainBody
	if err := decodeJSON(data, &body); err != nil || body.Timeout == "" {
		return 0, err
	}
	timeout, err := time.ParseDuration(body.Timeout)
	if err != nil || timeout <= 0 || timeout > MaxDrainTimeout {
		return 0, invalid("timeout", "%q is not a duration above 0 and at most %s (like 5m)", body.Timeout, MaxDrainTimeout)
	}
	return timeout, nil
}

// listDrains lists the drains in progress and finished, by service and backend.
func (s *server) listDrains(w http.ResponseWriter, _ *http.Request) error {
	drains := s.engine.Drains()
	slices.SortFunc(drains, func(a, b engine.DrainView) int {
		return cmp.Or(cmp.Compare(a.Service, b.Service), cmp.Compare(a.Backend, b.Backend))
	})
	return respond(w, http.StatusOK, orEmpty(drains))
}
