package metrics

import (
	"errors"
	"fmt"
	"net/http"
)

// Healthz answers 200 "ok" while the process serves HTTP: a liveness probe.
func Healthz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
}

// Readyz answers 200 once src's engine has applied its config to the datapath and its last apply
// (or resync against the kernel) succeeded, 503 with the reason otherwise: a readiness probe. It
// reads no kernel state, so probing it often costs nothing, and it does not look at the backends'
// health or a node drain (`sluice node status` does).
func Readyz(src Source) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(src); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
}

func ready(src Source) error {
	stats := src.Stats()
	switch {
	case stats.LastError != "":
		return fmt.Errorf("the last datapath apply failed: %s", stats.LastError)
	case stats.Applies == 0:
		return errors.New("the config is not applied to the datapath yet")
	}
	return nil
}
