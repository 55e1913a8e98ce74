package api

import (
	_ "embed"
	"net/http"
)

// openAPIDocument describes this API; a test checks the handlers against it.
//
//go:embed openapi.yaml
var openAPIDocument []byte

func (s *server) openAPI(w http.ResponseWriter, _ *http.Request) error {
	w.Header().Set("Content-Type", mediaYAML)
	_, _ = w.Write(openAPIDocument)
	return nil
}
