package api

import (
	"net/http"
	"time"
)

func (s *server) status(w http.ResponseWriter, _ *http.Request) error {
	return respond(w, http.StatusOK, Status{
		Version: s.info.Version, Datapath: s.info.Datapath, ConfigFile: s.info.ConfigFile, ConfigSource: s.info.Source,
		Started: s.info.Started, UptimeSeconds: time.Since(s.info.Started).Seconds(),
		Apply: s.engine.Stats(),
	})
}

func (s *server) health(w http.ResponseWriter, _ *http.Request) error {
	return respond(w, http.StatusOK, orEmpty(s.engine.Health()))
}
