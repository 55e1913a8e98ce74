package api

import (
	_ "embed"
	"net/http"
	"time"
)

// openAPIDocument describes this API; a test checks the handlers against it.
//
//go:embed openapi.yaml
var openAPIDocument []byte

func (s *server) status(w http.ResponseWriter, _ *http.Request) error {
	return respond(w, http.StatusOK, Status{
		Version: s.info.Version, Datapath: s.info.Datapath, ConfigFile: s.info.ConfigFile,
		Started: s.info.Started, UptimeSeconds: time.Since(s.info.Started).Seconds(),
		Apply: s.engine.Stats(),
	})
}

func (s *server) health(w http.ResponseWriter, _ *http.Request) error {
	return respond(w, http.StatusOK, orEmpty(s.engine.Health()))
}

func (s *server) openAPI(w http.ResponseWriter, _ *http.Request) error {
	w.Header().Set("Content-Type", mediaYAML)
	_, _ = w.Write(openAPIDocument)
	return nil
}
