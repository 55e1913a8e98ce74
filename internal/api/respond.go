package api

import (
	"encoding/json"
	"net/http"

	"github.com/sluicelb/sluice/internal/plan"
)

// respond writes v as JSON with status. It fails only when v does not encode, before anything is
// written, so that the error can still be answered.
func respond(w http.ResponseWriter, status int, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", mediaJSON)
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
	return nil
}

// respondChange answers a removal, a reload, a replaced config and every dry run: 200 {change}.
func respondChange(w http.ResponseWriter, change plan.Change) error {
	return respond(w, http.StatusOK, ChangeResult{Change: change})
}

// orEmpty makes a nil list encode as [] rather than null.
func orEmpty[T any](list []T) []T {
	if list == nil {
		return []T{}
	}
	return list
}
