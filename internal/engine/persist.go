package engine

import (
	"fmt"
	"sync"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/state"
)

// Events about keeping the running config across restarts (Options.State).
const (
	// EventConfigSource: where the running config came from on start (the config or the state file).
	EventConfigSource = "config_source"
	// EventStateNotSaved: a change is in effect but could not be saved, so a restart would lose it.
	EventStateNotSaved = "state_not_saved"
)

// saving is the engine's side of Options.State: the version of the config file the running
// config derives from, and which change was saved last.
type saving struct {
	origin  state.Origin // guarded by Engine.mu, like the running config it describes
	changes uint64       // changes made to the running config; guarded by Engine.mu

	mu     sync.Mutex // serializes the writes, in the order of the changes
	saved  uint64     // the last change written
	failed bool       // the last write failed: retried at every resync
}

// snapshot is a running config to save: the config after change number seq, which derives from
// the config file's version origin; reload tells that it is that file, just read.
type snapshot struct {
	cfg    *config.Config
	origin state.Origin
	seq    uint64
	reload bool
}

// startSaving publishes where the running config came from; New calls it.
func (e *Engine) startSaving() {
	if e.opts.State == nil {
		return
	}
	e.saving.origin = e.opts.State.Origin()
	e.publish(Event{Type: EventConfigSource, Message: e.opts.State.Start().Message})
}

// changed records that next became the running config, from the config file's version from when
// it is a reload; e.mu is held. It returns what save must write.
func (e *Engine) changed(next *config.Config, from *state.Origin) snapshot {
	if from != nil {
		e.saving.origin = *from
	}
	e.saving.changes++
	return snapshot{cfg: next, origin: e.saving.origin, seq: e.saving.changes, reload: from != nil}
}

// save keeps s across restarts, unless a later change was saved first. The running config is
// never changed after it is replaced, so s.cfg is read without e.mu. A failed write is logged and
// published, and retried at every resync: the change stays in effect meanwhile.
func (e *Engine) save(s snapshot) {
	if e.opts.State == nil {
		return
	}
	e.saving.mu.Lock()
	defer e.saving.mu.Unlock()
	if s.seq <= e.saving.saved {
		return
	}
	if err := e.opts.State.Save(s.cfg, s.origin, s.reload); err != nil {
		e.log.Error("saving the running config failed: the change is in effect, but a restart would lose it", "err", err)
		if !e.saving.failed {
			e.publish(Event{Type: EventStateNotSaved, Message: fmt.Sprintf("saving the running config failed, retried at every resync; a restart would lose the changes since: %v", err)})
		}
		e.saving.failed = true
		return
	}
	if e.saving.failed {
		e.log.Info("the running config is saved again")
	}
	e.saving.saved, e.saving.failed = s.seq, false
}

// retrySave saves the running config again after a failed write.
func (e *Engine) retrySave() {
	e.saving.mu.Lock()
	failed := e.saving.failed
	e.saving.mu.Unlock()
	if !failed {
		return
	}
	e.mu.Lock()
	s := snapshot{cfg: e.cfg, origin: e.saving.origin, seq: e.saving.changes}
	e.mu.Unlock()
	e.save(s)
}

// keepState gives next, a whole config sent through the API, the running config's state section:
// that section is the config file's to set (it names a file the daemon writes). A next without
// one keeps the running one; one that differs is refused.
func keepState(running, next *config.Config) error {
	if next.State != (config.State{}) && next.State.Resolved() != running.State.Resolved() {
		return config.Errors{{Path: "state", Msg: "is set in the config file only (edit it, then reload): the API keeps the running one"}}
	}
	next.State = running.State
	return nil
}
