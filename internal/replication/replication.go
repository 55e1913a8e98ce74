// Package replication runs what a config's sync section asks of this node: conntrackd for the
// live changes of the kernel's conntrack table (the nft datapath's flows, and those of the
// services the ebpf datapath hands to nft) with Sluice's own full resync of that table when the
// node starts (flowsync over internal/cttable), and Sluice's own replication of the ebpf
// datapath's flow tables (flowsync). The engine hands it the whole config each time (Set), as it
// does the datapath.
package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicelb/sluice/internal/boundedread"
	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/conntrackd"
	"github.com/sluicelb/sluice/internal/cttable"
	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/flowsync"
)

// Event is something the replication tells the operator (a peer up or down, a resync, the
// initial sync done); Kind is the engine's event type.
type Event struct {
	Kind    string
	Message string
}

// Runner runs the replication in the network namespace of the thread that made it.
type Runner struct {
	ctx      context.Context
	log      *slog.Logger
	dp       datapath.Datapath
	stateDir string
	notify   func(Event)
	ctd      *conntrackd.Supervisor

	mu      sync.Mutex
	running *config.Sync // the section Set runs, nil: none
	needs   needs
	flows   *flowRun
	// table is the conntrack table's full resync, beside conntrackd (nil: none).
	table *flowRun
	since time.Time // when the running section was set: its initial sync started
	// lapsing is table's Replicator while it runs, paused and resumed through conntrackd's
	// lapses (see conntrackd.Lapses); apart from mu, which a Set holds while it stops conntrackd.
	lapsing atomic.Pointer[flowsync.Replicator]
}

// flowRun is a running flowsync.Replicator and how to stop it.
type flowRun struct {
	r      *flowsync.Replicator
	cancel context.CancelFunc
	done   chan struct{}
}

// stop stops the Replicator and waits for it; nil does nothing.
func (f *flowRun) stop() {
	if f == nil {
		return
	}
	f.cancel()
	<-f.done
}

// needs says which replication a config needs.
type needs struct {
	conntrackd bool // flows live in the kernel's conntrack table
	flows      bool // flows live in the ebpf datapath's tables
}

func needsOf(cfg *config.Config) needs {
	if cfg.Sync == nil {
		return needs{}
	}
	if cfg.Datapath != config.DatapathEBPF {
		return needs{conntrackd: true}
	}
	n := needs{flows: true}
	for _, s := range cfg.Services {
		n.conntrackd = n.conntrackd || s.SYNProtection // handed to nft, tracked by conntrack
	}
	return n
}

// New returns a Runner acting in the calling thread's network namespace until ctx ends; dp is
// the datapath whose flows it replicates, stateDir where conntrackd's files go, and notify (which
// must not block) is told of peers and resyncs.
func New(ctx context.Context, dp datapath.Datapath, stateDir string, log *slog.Logger, notify func(Event)) (*Runner, error) {
	var beside func(func() (bool, error)) error
	if sharer, ok := dp.(datapath.TableSharer); ok {
		beside = sharer.Beside // the guard table's transactions do not make the datapath read back
	}
	ctd, err := conntrackd.New(ctx, log, beside)
	if err != nil {
		return nil, err
	}
	r := &Runner{ctx: ctx, log: log, dp: dp, stateDir: stateDir, notify: notify, ctd: ctd}
	ctd.OnLapse(conntrackd.Lapses{Stopped: r.conntrackdStopped, Restarted: r.conntrackdRestarted})
	return r, nil
}

// conntrackdStopped pauses the conntrack table's resync when conntrackd stopped unasked: its
// peers stop hearing this node when its changes stopped reaching them.
func (r *Runner) conntrackdStopped(at time.Time) {
	if rep := r.lapsing.Load(); rep != nil {
		rep.Pause(at)
	}
}

// conntrackdRestarted resumes the conntrack table's resync once conntrackd runs again: this node
// and its peers ask each other for the connections they served while it was down.
func (r *Runner) conntrackdRestarted() {
	if rep := r.lapsing.Load(); rep != nil {
		if err := rep.Resume(); err != nil {
			r.log.Error("sync: resuming the conntrack table's resync after conntrackd restarted", "err", err)
		}
	}
}

// Check tells whether Set could run cfg's sync section on this host, changing nothing; a refusal
// is a config.Errors naming the field (sync.secret_file, sync.interface, ...).
func (r *Runner) Check(cfg *config.Config) error {
	n := needsOf(cfg)
	if n == (needs{}) {
		return nil
	}
	if _, err := readSecret(cfg.Sync.SecretFile); err != nil {
		return fieldErrors(err)
	}
	if _, ok := r.dp.(datapath.FlowReplicator); n.flows && !ok {
		return config.Errors{{Path: "sync", Msg: "this datapath cannot replicate its flows"}}
	}
	o := r.conntrackdOptions(cfg.Sync)
	if n.conntrackd {
		if err := o.Check(); err != nil {
			return fieldErrors(err)
		}
	}
	// the sync link, for conntrackd and the flow tables alike
	if _, err := conntrackd.LinkAddress(o); err != nil {
		return fieldErrors(err)
	}
	if n.conntrackd {
		return fieldErrors(conntrackd.CheckLiberalTCP())
	}
	return nil
}

// Set runs what cfg's sync section asks for, the whole desired state: a section removed stops
// the replication; the section it already runs changes nothing.
func (r *Runner) Set(cfg *config.Config) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := needsOf(cfg)
	if n == r.needs && reflect.DeepEqual(cfg.Sync, r.running) {
		return nil
	}
	var secret []byte
	if n != (needs{}) {
		s, err := readSecret(cfg.Sync.SecretFile)
		if err != nil {
			return err
		}
		secret = s
	}
	var o *conntrackd.Options
	if n.conntrackd {
		o = r.conntrackdOptions(cfg.Sync)
	}
	if err := r.ctd.Set(r.ctx, o); err != nil {
		return fieldErrors(err)
	}
	r.flows.stop()
	r.lapsing.Store(nil)
	r.table.stop()
	r.flows, r.table = nil, nil
	var err error
	if n.flows {
		dp, _ := r.dp.(datapath.FlowReplicator)
		r.flows, err = r.startFlows(r.flowOptions(cfg.Sync, secret, cfg.Sync.PortOrDefault()), dp, nil)
	}
	if err == nil && n.conntrackd {
		err = r.startTable(cfg.Sync, secret)
	}
	if err != nil {
		r.flows.stop()
		r.flows = nil
		_ = r.ctd.Set(r.ctx, nil)
		r.running, r.needs = nil, needs{}
		return err
	}
	r.running, r.needs, r.since = cfg.Sync.Clone(), n, time.Now()
	return nil
}

// conntrackdOptions converts the sync section for conntrackd.
func (r *Runner) conntrackdOptions(s *config.Sync) *conntrackd.Options {
	return &conntrackd.Options{
		Interface: s.Interface, Address: s.Address.Addr, Peers: addrs(s.Peers), Group: s.Group.Addr,
		Port: s.ConntrackdPort(), StateDir: filepath.Join(r.stateDir, "conntrackd"),
	}
}

// flowOptions are flowsync's options for s, on port.
func (r *Runner) flowOptions(s *config.Sync, secret []byte, port int) flowsync.Options {
	return flowsync.Options{
		Interface: s.Interface, Address: s.Address.Addr, Peers: addrs(s.Peers), Group: s.Group.Addr,
		Port: port, Secret: secret, InitialSyncTimeout: s.InitialSyncTimeoutOrDefault(),
		RefreshInterval: s.RefreshIntervalOrDefault(),
		Notify:          func(ev flowsync.Event) { r.notify(Event{Kind: string(ev.Kind), Message: ev.Message}) },
	}
}

// startFlows starts a flowsync.Replicator with o over table; closed, if set, is called once it
// has stopped.
func (r *Runner) startFlows(o flowsync.Options, table datapath.FlowReplicator, closed func()) (*flowRun, error) {
	rep, err := flowsync.New(o, table, r.log)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(r.ctx)
	run := &flowRun{r: rep, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(run.done)
		if closed != nil {
			defer closed()
		}
		if err := rep.Run(ctx); err != nil {
			r.log.Error("sync: flow replication stopped", "err", err, "port", o.Port)
		}
	}()
	return run, nil
}

// startTable starts the conntrack table's full resync for s: a node that starts asks each peer
// once, when it first hears it, for its table, and a peer that restarted (or every peer, after
// conntrackd restarted here) for what it served since, and writes in what it does not track
// (cttable), while conntrackd sends the live changes. It has a port of its own, and no refresh:
// conntrackd never lets a copy age.
func (r *Runner) startTable(s *config.Sync, secret []byte) error {
	o := r.flowOptions(s, secret, s.ConntrackResyncPort())
	o.NoRefresh, o.ResyncOnce = true, true
	ignore := addrs(s.Peers)
	if s.Address.IsValid() {
		ignore = append(ignore, s.Address.Addr)
	} else if st := r.ctd.Status(); st.Options != nil {
		ignore = append(ignore, st.Options.Address) // the address conntrackd settled
	}
	table, err := cttable.New(ignore)
	if err != nil {
		return err
	}
	run, err := r.startFlows(o, table, func() { table.Close() })
	if err != nil {
		table.Close()
		return err
	}
	r.table = run
	r.lapsing.Store(run.r)
	return nil
}

// Wait waits, once the Runner's context ended, for the replication to stop: the flow
// replication's goroutines, conntrackd (SIGTERM, then SIGKILL after 5 s) and its nft guard table.
func (r *Runner) Wait() {
	r.mu.Lock()
	for _, run := range []*flowRun{r.flows, r.table} {
		if run != nil {
			<-run.done
		}
	}
	r.mu.Unlock()
	<-r.ctd.Done()
}

// Ready tells whether the node has the state it needs before it takes traffic: no replication is
// configured, or the initial sync from a peer completed, or its timeout passed; and, back from
// being cut off from every peer without serving meanwhile, a resync from a peer completed or its
// timeout passed (flowsync's Rejoining). why says which, or what it waits for.
func (r *Runner) Ready() (ready bool, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running == nil {
		return true, "no sync section"
	}
	timeout := r.running.InitialSyncTimeoutOrDefault()
	var waiting []string
	if r.needs.conntrackd && !closed(r.table.r.InitialSyncDone()) {
		waiting = append(waiting, "the conntrack table")
	}
	if r.needs.flows && !closed(r.flows.r.InitialSyncDone()) {
		waiting = append(waiting, "the flow tables")
	}
	if len(waiting) == 0 && r.needs.flows {
		if j := r.flows.r.Rejoining(); j.Pending {
			return false, fmt.Sprintf("waiting for a full resync of the flow tables: this node was cut off from every peer, served no new flow meanwhile, and %s came back %s ago (at most %s)",
				j.Peer, time.Since(j.Since).Round(time.Millisecond), timeout)
		}
	}
	switch {
	case len(waiting) == 0:
		return true, "initial sync done"
	case time.Since(r.since) >= timeout:
		return true, fmt.Sprintf("initial sync of %s not done within sync.initial_sync_timeout (%s): taking traffic without it", strings.Join(waiting, " and "), timeout)
	}
	return false, fmt.Sprintf("waiting for the initial sync of %s from a peer (at most %s)", strings.Join(waiting, " and "), timeout)
}

// Status is the replication's state, for `sluice sync` and the metrics.
type Status struct {
	// Enabled tells whether the config has a sync section.
	Enabled bool   `json:"enabled"`
	Ready   bool   `json:"ready"`
	Why     string `json:"why"`
	// Conntrackd is conntrackd's health, when the node runs it.
	Conntrackd *conntrackd.Status `json:"conntrackd,omitempty"`
	// Flows is the ebpf flow tables' replication, when the node runs it.
	Flows *FlowStatus `json:"flows,omitempty"`
	// ConntrackResync is the conntrack table's full resync (its peers and resyncs), when the
	// node runs conntrackd.
	ConntrackResync *FlowStatus `json:"conntrack_resync,omitempty"`
}

// Status reads the replication's state now.
func (r *Runner) Status() Status {
	ready, why := r.Ready()
	r.mu.Lock()
	defer r.mu.Unlock()
	st := Status{Enabled: r.running != nil, Ready: ready, Why: why}
	if r.needs.conntrackd {
		c := r.ctd.Status()
		st.Conntrackd = &c
	}
	if r.flows != nil {
		f := flowStatus(r.flows.r.Status())
		f.LostEvents = r.lostFlows()
		st.Flows = &f
	}
	if r.table != nil {
		f := flowStatus(r.table.r.Status())
		st.ConntrackResync = &f
	}
	return st
}

// lostFlows reads how many flow events the datapath lost; a failure to read is logged and counts
// as none lost since the last read would not: the counter is the datapath's, it never resets.
func (r *Runner) lostFlows() uint64 {
	dp, ok := r.dp.(datapath.FlowReplicator)
	if !ok {
		return 0
	}
	ctx, cancel := context.WithTimeout(r.ctx, statusTimeout)
	defer cancel()
	n, err := dp.LostFlows(ctx)
	if err != nil {
		r.log.Warn("sync: reading the lost flow events", "err", err)
	}
	return n
}

// statusTimeout bounds what Status waits for the datapath.
const statusTimeout = 2 * time.Second

// readSecret reads the shared secret of sync.secret_file: a regular file, at most a token's
// size, its content without surrounding whitespace at least flowsync.MinSecret bytes.
func readSecret(path string) ([]byte, error) {
	data, err := boundedread.File(path, boundedread.TokenBytes)
	if err != nil {
		return nil, &conntrackd.FieldError{Field: "sync.secret_file", Msg: err.Error()}
	}
	secret := []byte(strings.TrimSpace(string(data)))
	if len(secret) < flowsync.MinSecret {
		return nil, &conntrackd.FieldError{Field: "sync.secret_file", Msg: fmt.Sprintf("%s holds %d bytes: the secret must be at least %d (head -c 32 /dev/urandom | base64 > %s)", path, len(secret), flowsync.MinSecret, path)}
	}
	return secret, nil
}

// fieldErrors is err as the config's errors: a refused field of the sync section names it, any
// other error is the section's; nil stays nil.
func fieldErrors(err error) error {
	var fe *conntrackd.FieldError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &fe):
		return config.Errors{{Path: fe.Field, Msg: fe.Msg}}
	}
	return config.Errors{{Path: "sync", Msg: err.Error()}}
}

func addrs(ips []config.IP) []netip.Addr {
	out := make([]netip.Addr, len(ips))
	for i, ip := range ips {
		out[i] = ip.Addr
	}
	return slices.Clip(out)
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
