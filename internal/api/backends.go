package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/engine"
	"github.com/sluicelb/sluice/internal/plan"
)

// backendPath is where the j-th backend of the i-th service sits in a config.
func backendPath(i, j int) string { return fmt.Sprintf("%s.backends[%d]", servicePath(i), j) }

// addBackend adds a backend to a service; one with the same address and port is a conflict.
func (s *server) addBackend(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	p, err := readChangeParams(r)
	if err != nil {
		return err
	}
	b, err := readJSON[config.Backend](r)
	if err != nil {
		return err
	}
	ref, valid := backendRef(b)
	shown := ref // in messages; a backend without a port is its address alone (plan.Backend.ID)
	if valid {
		shown = plan.Backend{Addr: b.Address.Unmap(), Port: uint16(b.Port)}.ID()
	}
	var at string
	change, made, err := s.update(r, p, fmt.Sprintf("api: add backend %s to %s", shown, name), func(cfg *config.Config) error {
		svc, i, err := engine.FindService(cfg, name)
		if err != nil {
			return err
		}
		if _, _, err := engine.FindBackend(svc, ref); valid && err == nil {
			return fmt.Errorf("backend %s of service %s: %w", shown, name, engine.ErrConflict)
		}
		svc.Backends = append(svc.Backends, b)
		at = backendPath(i, len(svc.Backends)-1)
		return nil
	})
	if err != nil {
		return relativeTo(at, err)
	}
	return s.respondBackend(w, r, p, http.StatusCreated, made, name, ref, change)
}

func (s *server) getBackend(w http.ResponseWriter, r *http.Request) error {
	view, err := s.backendView(r.Context(), s.engine.Config(), r.PathValue("name"), r.PathValue("backend"))
	if err != nil {
		return err
	}
	return respond(w, http.StatusOK, view)
}

// patchBackend changes a backend's weight, the only field that can be patched.
func (s *server) patchBackend(w http.ResponseWriter, r *http.Request) error {
	name, ref := r.PathValue("name"), r.PathValue("backend")
	p, err := readChangeParams(r)
	if err != nil {
		return err
	}
	body, err := readJSON[weightBody](r)
	if err != nil {
		return err
	}
	if body.Weight == nil {
		return invalid("weight", "missing: send {\"weight\": N}")
	}
	change, made, err := s.setWeight(r, p, name, ref, *body.Weight)
	if err != nil {
		return err
	}
	return s.respondBackend(w, r, p, http.StatusOK, made, name, ref, change)
}

func (s *server) removeBackend(w http.ResponseWriter, r *http.Request) error {
	name, ref := r.PathValue("name"), r.PathValue("backend")
	p, err := readChangeParams(r)
	if err != nil {
		return err
	}
	change, _, err := s.update(r, p, fmt.Sprintf("api: remove backend %s of %s", ref, name), func(cfg *config.Config) error {
		svc, _, err := engine.FindService(cfg, name)
		if err != nil {
			return err
		}
		_, j, err := findBackend(svc, ref)
		if err != nil {
			return err
		}
		svc.Backends = slices.Delete(svc.Backends, j, j+1)
		return nil
	})
	if err != nil {
		return err
	}
	return respondChange(w, change)
}

// setWeight sets the weight of a service's backend, and returns the config it made (see update);
// validation errors name the field "weight".
func (s *server) setWeight(r *http.Request, p changeParams, service, ref string, weight int) (plan.Change, *config.Config, error) {
	var at string
	change, made, err := s.update(r, p, fmt.Sprintf("api: weight of %s backend %s set to %d", service, ref, weight), func(cfg *config.Config) error {
		svc, i, err := engine.FindService(cfg, service)
		if err != nil {
			return err
		}
		b, j, err := findBackend(svc, ref)
		if err != nil {
			return err
		}
		b.Weight = &weight
		at = backendPath(i, j)
		return nil
	})
	return change, made, relativeTo(at, err)
}

// respondBackend answers a backend added or reweighted with status, as made, the config the
// change made, holds it; a dry run with its change.
func (s *server) respondBackend(w http.ResponseWriter, r *http.Request, p changeParams, status int, made *config.Config, service, ref string, change plan.Change) error {
	if p.dryRun {
		return respondChange(w, change)
	}
	view, err := s.backendView(r.Context(), made, service, ref)
	if err != nil {
		return err
	}
	return respond(w, status, BackendResult{Backend: view, Change: change})
}

// backendView describes the backend that ref names (see engine.FindBackend) of a service of cfg.
func (s *server) backendView(ctx context.Context, cfg *config.Config, service, ref string) (engine.BackendView, error) {
	_, j, err := lookupBackend(cfg, service, ref)
	if err != nil {
		return engine.BackendView{}, err
	}
	view, err := s.engine.ServiceOf(ctx, cfg, service)
	if err != nil {
		return engine.BackendView{}, err
	}
	// The view lists the configured backends in config order, then the sorry servers.
	return view.Backends[j], nil
}

// lookupBackend finds the backend ref names in a service of cfg, and its index.
func lookupBackend(cfg *config.Config, service, ref string) (*config.Backend, int, error) {
	svc, _, err := engine.FindService(cfg, service)
	if err != nil {
		return nil, -1, err
	}
	return findBackend(svc, ref)
}

// findBackend is engine.FindBackend with a malformed or ambiguous reference answered by 400.
func findBackend(svc *config.Service, ref string) (*config.Backend, int, error) {
	b, j, err := engine.FindBackend(svc, ref)
	if err != nil && !errors.Is(err, engine.ErrNotFound) {
		return nil, -1, invalid("backend", "%v", err)
	}
	return b, j, err
}

// backendRef names a backend to add the way engine.FindBackend reads it ("10.0.0.1:8080",
// "10.0.0.1:0" when it takes the client's port); valid is false for an address or port that
// validation is going to reject.
func backendRef(b config.Backend) (ref string, valid bool) {
	if !b.Address.IsValid() || b.Port < 0 || b.Port > 65535 {
		return b.Address.String(), false
	}
	return netip.AddrPortFrom(b.Address.Unmap(), uint16(b.Port)).String(), true
}
