package api

import (
	"net"
	"net/http"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/engine"
	"github.com/sluicelb/sluice/internal/plan"
)

// update is engine.Update for the change a request asks for. No client may change the state
// section (config.APIGuard.CheckState), and a client that is not root (see fromRoot) may not make
// the other changes config.APIGuard refuses: they are answered with 403 and change nothing.
// Besides the change, it returns the config the change made running (the one it would make, for
// a dry run): the answer describes it, not the running config a later change may have replaced.
func (s *server) update(r *http.Request, p changeParams, why string, mutate engine.Mutation) (plan.Change, *config.Config, error) {
	mutate = guarded(mutate, fromRoot(r))
	var made *config.Config
	result, err := s.engine.Update(p.dryRun, why, func(cfg *config.Config) error {
		made = cfg
		return mutate(cfg)
	})
	if err != nil {
		return result.Change, nil, err
	}
	return result.Change, made, s.waitApplied(r, p, result.Generation)
}

// guarded is mutate refused (forbiddenChange) when it makes a change config.APIGuard refuses: to
// root, a change of the state section; to others, every change Check lists.
func guarded(mutate engine.Mutation, root bool) engine.Mutation {
	return func(cfg *config.Config) error {
		guard := config.NewAPIGuard(cfg)
		if err := mutate(cfg); err != nil {
			return err
		}
		check := guard.Check
		if root {
			check = guard.CheckState
		}
		if errs := check(cfg); len(errs) > 0 {
			return forbiddenChange{errs}
		}
		return nil
	}
}

// fromRoot tells whether r came over the daemon's unix socket, which only root can open
// (ListenUnix leaves it 0600): its client could run any command anyway. A request over TCP
// holds a token, not root.
func fromRoot(r *http.Request) bool {
	addr, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	return ok && addr.Network() == "unix"
}
