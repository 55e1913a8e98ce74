package api

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/sluicelb/sluice/internal/datapath"
)

// flows lists the flows the datapath tracks for a service: ?backend=ADDR[:PORT] keeps those to
// one backend, ?limit=N (default datapath.DefaultFlowLimit) bounds the answer; total counts them all.
func (s *server) flows(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	limit := datapath.DefaultFlowLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return invalid("limit", "%q is not a number", v)
		}
		limit = n
	}
	filter, err := datapath.ParseFlowFilter(q.Get("backend"), limit)
	var bad *datapath.FlowFilterError
	if errors.As(err, &bad) {
		return invalid(bad.Field, "%s", bad.Msg)
	}
	list, err := s.engine.Flows(r.Context(), r.PathValue("name"), filter)
	if err != nil {
		return err
	}
	return respond(w, http.StatusOK, list)
}
