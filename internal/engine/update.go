package engine

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/plan"
	"github.com/sluicelb/sluice/internal/state"
)

// ErrNotFound is returned (wrapped) when a service or backend named by the caller does not exist.
var ErrNotFound = errors.New("not found")

// ErrConflict is returned (wrapped) when a service or backend to add already exists.
var ErrConflict = errors.New("already exists")

// Mutation changes a copy of the running config; an error leaves the running config untouched.
type Mutation func(cfg *config.Config) error

// Config returns a copy of the running config.
func (e *Engine) Config() *config.Config {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cfg.Clone()
}

// running is the running config. A running config is never changed once it is replaced (a
// change makes a new one), so what running returns is read without e.mu.
func (e *Engine) running() *config.Config {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cfg
}

// Update applies a mutation to the running config: the result is validated as a whole and, unless
// dryRun, becomes the running config and is reconciled. It returns what the change does to the plan
// (which services change and the share of each one's new flows that moves) and the generation of
// the running config it made, to Wait for. On any error nothing changes.
// A change that takes effect is saved (Options.State) before Update returns.
func (e *Engine) Update(dryRun bool, why string, mutate Mutation) (Result, error) {
	return e.update(dryRun, why, nil, mutate)
}

// update is Update; from is the config file's version when the change is a reload of that file.
func (e *Engine) update(dryRun bool, why string, from *state.Origin, mutate Mutation) (Result, error) {
	result, saved, err := e.apply(dryRun, why, from, mutate)
	if err == nil && !dryRun {
		e.save(saved)
	}
	return result, err
}

// apply makes the change of update, and returns what to save.
func (e *Engine) apply(dryRun bool, why string, from *state.Origin, mutate Mutation) (Result, snapshot, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	refused := Result{Generation: e.gens.last()}
	next := e.cfg.Clone()
	if err := mutate(next); err != nil {
		return refused, snapshot{}, err
	}
	if errs := next.Validate(); len(errs) > 0 {
		return refused, snapshot{}, errs
	}
	if errs := sameDatapath(e.cfg, next); len(errs) > 0 {
		return refused, snapshot{}, errs
	}
	if err := e.checkBGP(next); err != nil {
		return refused, snapshot{}, err
	}
	if err := e.checkSync(next); err != nil {
		return refused, snapshot{}, err
	}
	before, err := e.planner.Build(e.cfg, e.available(e.cfg))
	if err != nil {
		return refused, snapshot{}, err
	}
	after, err := e.planner.Build(next, e.available(next))
	if err != nil {
		return refused, snapshot{}, err
	}
	if err := e.budget(after); err != nil {
		return refused, snapshot{}, err
	}
	change := plan.Diff(before, after)
	change.NoteHealthChecks(e.cfg, next, after)
	change.NoteBGP(e.cfg, next)
	if dryRun {
		return Result{Change: change, Generation: refused.Generation}, snapshot{}, nil
	}
	warned := e.cfg.Warnings()
	e.cfg = next
	gen := e.gens.next()
	for _, w := range next.Warnings() {
		if !slices.Contains(warned, w) {
			e.publish(Event{Type: EventConfigWarning, Message: w})
		}
	}
	e.prober.Set(probes(next))
	for _, ev := range e.drains.cancelStale(next) {
		e.events.publish(ev)
	}
	if !change.Empty() {
		e.publish(Event{Type: EventConfigChanged, Message: describe(why, change)})
	}
	e.trigger()
	return Result{Change: change, Generation: gen}, e.changed(next, from), nil
}

// Replace makes cfg, a whole config sent through the API, the running config; see Update. Its
// state section must be the running one, or absent.
func (e *Engine) Replace(dryRun bool, why string, cfg *config.Config) (Result, error) {
	return e.Update(dryRun, why, func(running *config.Config) error {
		next := cfg.Clone()
		if err := keepState(running, next); err != nil {
			return err
		}
		*running = *next
		return nil
	})
}

// Reload reads the config file again and makes it the running config, replacing what the state
// file held; a file that does not load or validate is rejected with its errors, published as a
// reload_failed event, and the running config stays.
func (e *Engine) Reload() (Result, error) {
	if e.opts.ConfigPath == "" {
		return Result{Generation: e.gens.last()}, errors.New("reload: the daemon was started without a config file")
	}
	result, err := e.reload()
	if err != nil {
		e.publish(Event{Type: EventReloadFailed, Message: "reload of " + e.opts.ConfigPath + " rejected, the running config stays: " + err.Error()})
	}
	return result, err
}

// reload is Reload of the config file, which exists.
func (e *Engine) reload() (Result, error) {
	cfg, origin, err := state.ReadConfigFile(e.opts.ConfigPath)
	if err != nil {
		return Result{Generation: e.gens.last()}, err
	}
	return e.update(false, "reload of "+e.opts.ConfigPath, &origin, func(running *config.Config) error {
		*running = *cfg
		return nil
	})
}

// sameDatapath refuses a change of the datapath or of where it attaches: the daemon holds one
// datapath for its life, so that takes a restart.
func sameDatapath(running, next *config.Config) config.Errors {
	var errs config.Errors
	if next.Datapath != running.Datapath {
		errs = append(errs, config.FieldError{Path: "datapath", Msg: fmt.Sprintf("the daemon runs datapath %s: changing it to %s takes a restart", running.Datapath, next.Datapath)})
	}
	if next.Attach != running.Attach {
		errs = append(errs, config.FieldError{Path: "attach", Msg: fmt.Sprintf("the daemon attaches at %s: changing it to %s takes a restart", running.Attach, next.Attach)})
	}
	if a, b := running.EBPFMapSizes(), next.EBPFMapSizes(); a != b {
		errs = append(errs, config.FieldError{Path: "ebpf", Msg: fmt.Sprintf("the daemon's maps hold %d flows and %d Maglev slots: resizing them to %d and %d takes a restart after `sluice flush`, which drops every flow", a.MaxFlows, a.MaglevSlots, b.MaxFlows, b.MaglevSlots)})
	}
	return errs
}

func describe(why string, c plan.Change) string {
	var parts []string
	for _, x := range []struct {
		verb  string
		names []string
	}{{"added", c.Added}, {"removed", c.Removed}, {"changed", c.Changed}} {
		if len(x.names) > 0 {
			parts = append(parts, x.verb+" "+strings.Join(x.names, ", "))
		}
	}
	for _, b := range c.BGP {
		parts = append(parts, b.Op+" "+b.Field)
	}
	return why + ": " + strings.Join(parts, "; ")
}

// FindService returns the named service of cfg.
func FindService(cfg *config.Config, name string) (*config.Service, int, error) {
	for i := range cfg.Services {
		if cfg.Services[i].Name == name {
			return &cfg.Services[i], i, nil
		}
	}
	return nil, -1, fmt.Errorf("service %q: %w", name, ErrNotFound)
}

// FindBackend returns the backend of s that ref names: "10.0.0.1:8080", "[fd00::1]:80", or a
// bare address when only one backend has it.
func FindBackend(s *config.Service, ref string) (*config.Backend, int, error) {
	want, bare, err := config.ParseBackendRef(ref)
	if err != nil {
		return nil, -1, err
	}
	found := -1
	for i, b := range s.Backends {
		if b.Address.Addr != want.Addr() || (!bare && b.Port != int(want.Port())) {
			continue
		}
		if found >= 0 {
			return nil, -1, fmt.Errorf("backend %q of service %s is ambiguous: give address:port", ref, s.Name)
		}
		found = i
	}
	if found < 0 {
		return nil, -1, fmt.Errorf("backend %q of service %s: %w", ref, s.Name, ErrNotFound)
	}
	return &s.Backends[found], found, nil
}

func splitKey(key string) (service, backend string) {
	service, backend, _ = strings.Cut(key, "/")
	return service, backend
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// budget refuses a plan beyond what the datapath may hold (see datapath.Budgeter), as an error
// of the config key that sets the limit.
func (e *Engine) budget(p *plan.Plan) error {
	b, ok := e.opts.Datapath.(datapath.Budgeter)
	if !ok {
		return nil
	}
	err := b.Budget(p)
	var over *datapath.BudgetError
	if errors.As(err, &over) {
		return config.Errors{config.FieldError{Path: over.Field, Msg: over.Error()}}
	}
	return err
}
