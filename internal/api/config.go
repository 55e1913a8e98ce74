package api

import (
	"errors"
	"mime"
	"net/http"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/plan"
)

// configBodyName stands for the file name in the errors of a YAML config body.
const configBodyName = "request body"

// getConfig answers the running config as JSON, or as YAML for ?format=yaml or Accept: application/yaml.
func (s *server) getConfig(w http.ResponseWriter, r *http.Request) error {
	asYAML, err := wantsYAML(r)
	if err != nil {
		return err
	}
	cfg := s.engine.Config()
	if !fromRoot(r) {
		cfg = cfg.Redacted() // a token does not read the BGP MD5 keys
	}
	if !asYAML {
		return respond(w, http.StatusOK, cfg)
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", mediaYAML)
	_, _ = w.Write(data)
	return nil
}

// putConfig replaces the running config with the body's.
func (s *server) putConfig(w http.ResponseWriter, r *http.Request) error {
	p, err := readChangeParams(r)
	if err != nil {
		return err
	}
	change, err := s.replaceConfig(r, p, "api: replace config")
	if err != nil {
		return err
	}
	return respondChange(w, change)
}

// plan answers what replacing the running config with the body's would change, changing nothing.
func (s *server) plan(w http.ResponseWriter, r *http.Request) error {
	if _, err := readChangeParams(r); err != nil {
		return err
	}
	change, err := s.replaceConfig(r, changeParams{dryRun: true}, "api: plan")
	if err != nil {
		return err
	}
	return respond(w, http.StatusOK, change)
}

// replaceConfig makes the body's config the running one (see server.update).
func (s *server) replaceConfig(r *http.Request, p changeParams, why string) (plan.Change, error) {
	cfg, err := readConfig(r)
	if err != nil {
		return plan.Change{}, err
	}
	change, _, err := s.update(r, p, why, func(running *config.Config) error {
		*running = *cfg
		return nil
	})
	return change, err
}

// reload reads the config file again, like SIGHUP.
func (s *server) reload(w http.ResponseWriter, r *http.Request) error {
	p, err := readChangeParams(r)
	if err != nil {
		return err
	}
	if s.info.ConfigFile == "" {
		return &Error{Status: http.StatusConflict, Message: "the daemon was started without a config file: there is nothing to reload"}
	}
	result, err := s.engine.Reload()
	if answer, ok := fieldAnswer(err, ""); ok {
		answer.Message = err.Error() // file:line: field: message, naming the daemon's file
		return answer
	}
	if err != nil {
		return err
	}
	if err := s.waitApplied(r, p, result.Generation); err != nil {
		return err
	}
	return respondChange(w, result.Change)
}

// readConfig reads a whole config from the body: YAML, whose errors carry lines, or strict JSON.
func readConfig(r *http.Request) (*config.Config, error) {
	data, media, err := readBody(r, append([]string{mediaJSON}, yamlMediaTypes...)...)
	if err != nil {
		return nil, err
	}
	if media == mediaJSON {
		var cfg config.Config
		if err := decodeJSON(data, &cfg); err != nil {
			return nil, err
		}
		if errs := append(cfg.Missing(), cfg.Validate()...); len(errs) > 0 {
			return nil, errs
		}
		return &cfg, nil
	}
	cfg, err := config.Parse(configBodyName, data)
	if err != nil && !errors.As(err, new(config.Errors)) {
		return nil, invalid("", "%v", err)
	}
	return cfg, err
}

// wantsYAML tells whether the client asks for YAML: ?format=yaml|json, else the Accept header.
func wantsYAML(r *http.Request) (bool, error) {
	switch format := r.URL.Query().Get("format"); format {
	case "yaml":
		return true, nil
	case "json":
		return false, nil
	case "":
	default:
		return false, invalid("format", "%q is not json or yaml", format)
	}
	for _, accepted := range strings.Split(r.Header.Get("Accept"), ",") {
		media, _, err := mime.ParseMediaType(strings.TrimSpace(accepted))
		if err == nil && slices.Contains(yamlMediaTypes, media) {
			return true, nil
		}
	}
	return false, nil
}
