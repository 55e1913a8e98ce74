package api

import (
	"fmt"
	"net/http"
	"slices"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/engine"
	"github.com/sluicelb/sluice/internal/plan"
)

// servicePath is where the i-th service sits in a config, as validation errors name it.
func servicePath(i int) string { return fmt.Sprintf("services[%d]", i) }

func (s *server) listServices(w http.ResponseWriter, r *http.Request) error {
	views, err := s.engine.Services(r.Context())
	if err != nil {
		return err
	}
	return respond(w, http.StatusOK, orEmpty(views))
}

func (s *server) getService(w http.ResponseWriter, r *http.Request) error {
	view, err := s.engine.Service(r.Context(), r.PathValue("name"))
	if err != nil {
		return err
	}
	return respond(w, http.StatusOK, view)
}

// addService creates a service; a service of the same name is a conflict.
func (s *server) addService(w http.ResponseWriter, r *http.Request) error {
	p, err := readChangeParams(r)
	if err != nil {
		return err
	}
	svc, err := readJSON[config.Service](r)
	if err != nil {
		return err
	}
	var at string
	change, made, err := s.update(r, p, "api: add service "+svc.Name, func(cfg *config.Config) error {
		if _, _, err := engine.FindService(cfg, svc.Name); err == nil {
			return fmt.Errorf("service %q: %w", svc.Name, engine.ErrConflict)
		}
		cfg.Services = append(cfg.Services, svc)
		at = servicePath(len(cfg.Services) - 1)
		return nil
	})
	if err != nil {
		return relativeTo(at, err)
	}
	return s.respondService(w, r, p, http.StatusCreated, made, svc.Name, change)
}

// putService replaces the named service, or creates it; the body may leave the name out.
func (s *server) putService(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	p, err := readChangeParams(r)
	if err != nil {
		return err
	}
	svc, err := readJSON[config.Service](r)
	if err != nil {
		return err
	}
	if svc.Name != "" && svc.Name != name {
		return invalid("name", "%q differs from the service %q in the path", svc.Name, name)
	}
	svc.Name = name
	var at string
	change, made, err := s.update(r, p, "api: replace service "+name, func(cfg *config.Config) error {
		_, i, err := engine.FindService(cfg, name)
		if err != nil {
			cfg.Services = append(cfg.Services, svc)
			i = len(cfg.Services) - 1
		}
		cfg.Services[i] = svc
		at = servicePath(i)
		return nil
	})
	if err != nil {
		return relativeTo(at, err)
	}
	return s.respondService(w, r, p, http.StatusOK, made, name, change)
}

func (s *server) removeService(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	p, err := readChangeParams(r)
	if err != nil {
		return err
	}
	change, _, err := s.update(r, p, "api: remove service "+name, func(cfg *config.Config) error {
		_, i, err := engine.FindService(cfg, name)
		if err != nil {
			return err
		}
		cfg.Services = slices.Delete(cfg.Services, i, i+1)
		return nil
	})
	if err != nil {
		return err
	}
	return respondChange(w, change)
}

// respondService answers a service added or replaced with status, as made, the config the change
// made, holds it; a dry run with its change.
func (s *server) respondService(w http.ResponseWriter, r *http.Request, p changeParams, status int, made *config.Config, name string, change plan.Change) error {
	if p.dryRun {
		return respondChange(w, change)
	}
	view, err := s.engine.ServiceOf(r.Context(), made, name)
	if err != nil {
		return err
	}
	return respond(w, status, ServiceResult{Service: view, Change: change})
}
