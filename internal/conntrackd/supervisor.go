package conntrackd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Timings of the supervision.
const (
	minBackoff = time.Second
	maxBackoff = 30 * time.Second
	// healthyRun is how long a process must have run for the next restart to wait minBackoff.
	healthyRun = time.Minute
	// stopGrace is how long conntrackd has to exit after SIGTERM before SIGKILL.
	stopGrace = 5 * time.Second
	// pollEvery is how often the statistics are read.
	pollEvery = 2 * time.Second
	// clientTimeout bounds a conntrackd client command.
	clientTimeout = 5 * time.Second
	// guardTimeout bounds a transaction of the guard table.
	guardTimeout = 10 * time.Second
)

// initializedLine is the line of conntrackd's log that tells the process is set up (its
// real-time scheduling included).
const initializedLine = "initialization completed"

// Supervisor runs conntrackd in the network namespace of the thread that made it.
type Supervisor struct {
	ns     netns.NsHandle
	log    *slog.Logger
	done   chan struct{}
	beside func(commit func() (bool, error)) error // runs the guard table's transactions; nil: directly

	setMu  sync.Mutex // serializes Set
	closed bool
	cur    *instance
	dir    *os.File // flock of the current state directory

	mu       sync.Mutex // guards status, cpuEnded and lapses
	status   Status
	cpuEnded time.Duration // CPU time of the conntrackd processes that have exited
	lapses   Lapses
}

// Lapses is told of the times conntrackd stops running unasked (it exited, was killed or could
// not start) while the Supervisor wants it to: the conntrack table's changes are then neither sent
// to the peers nor taken from them. Stopped is told when it stopped, Restarted when a process
// started after that is set up. Both are called from the Supervisor's goroutine and must not
// block (a Set may be waiting for that goroutine).
type Lapses struct {
	Stopped   func(at time.Time)
	Restarted func()
}

// OnLapse sets what the Supervisor tells of conntrackd's lapses (see Lapses).
func (s *Supervisor) OnLapse(l Lapses) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lapses = l
}

// lapse is what the Supervisor tells of conntrackd's lapses.
func (s *Supervisor) lapse() Lapses {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lapses
}

// Status is conntrackd's health, as `sluice sync` and the metrics show it.
type Status struct {
	// Running tells whether conntrackd runs; PID and Since are the process's.
	Running bool      `json:"running"`
	PID     int       `json:"pid,omitempty"`
	Since   time.Time `json:"since,omitzero"`
	// Reason says why it does not run: sync off, or how it exited and when it restarts.
	Reason    string    `json:"reason,omitempty"`
	RestartAt time.Time `json:"restart_at,omitzero"`
	// Restarts counts the processes started after the first.
	Restarts int `json:"restarts"`
	// Stats are the running process's counters; StatsError why they could not be read.
	Stats      Stats  `json:"stats"`
	StatsError string `json:"stats_error,omitempty"`
	// ForeignDrops counts the packets to conntrackd's port the nftables rules dropped.
	ForeignDrops uint64 `json:"foreign_drops"`
	// CPUSeconds is the CPU time (user and system) of the conntrackd processes this Supervisor
	// ran: those that exited, and the running one's when its statistics were last read.
	CPUSeconds float64 `json:"cpu_seconds"`
	// Options are the settled options conntrackd runs with (nil: sync off).
	Options *Options `json:"-"`
}

// instance is one set of options being run: the goroutine that (re)starts conntrackd for it.
type instance struct {
	want   *Options // as given to Set
	opts   *Options // settled
	guard  guard    // the rules guarding its port
	cancel context.CancelFunc
	exited chan struct{}
	// initialized is signalled when the process is set up.
	initialized chan struct{}
}

// New returns a Supervisor acting in the calling thread's network namespace, stopped when ctx
// ends (conntrackd stopped, its rules removed; Done is closed then). beside, when not nil, runs
// each transaction of its guard table (see datapath.TableSharer).
func New(ctx context.Context, log *slog.Logger, beside func(commit func() (bool, error)) error) (*Supervisor, error) {
	ns, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("reading the network namespace: %w", err)
	}
	s := &Supervisor{ns: ns, log: log, beside: beside, done: make(chan struct{})}
	s.status.Reason = "sync is off"
	go func() {
		<-ctx.Done()
		if err := s.shutdown(); err != nil {
			log.Error("conntrackd: stopping", "err", err)
		}
		ns.Close()
		close(s.done)
	}()
	return s, nil
}

// guardTable installs g (nil removes the table) in the Supervisor's namespace: one nftables
// transaction, run through beside, so that the datapath's tables are not read back for it.
// A transaction begun runs to its end (up to guardTimeout) even when ctx ends meanwhile: an nft
// process killed mid-transaction leaves a table that may or may not be in the kernel, which
// neither the stop that follows nor the datapath's generation (beside) could account for.
func (s *Supervisor) guardTable(ctx context.Context, g *guard) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("guarding conntrackd's port with table inet %s: %w", RulesTable, err)
	}
	run, cancel := context.WithTimeout(context.WithoutCancel(ctx), guardTimeout)
	defer cancel()
	commit := func() (bool, error) {
		err := inNamespace(s.ns, func() error { return applyGuard(run, g) })
		return err == nil, err
	}
	if s.beside == nil {
		_, err := commit()
		return err
	}
	return s.beside(commit)
}

// Done is closed once the Supervisor has stopped after its context ended.
func (s *Supervisor) Done() <-chan struct{} { return s.done }

// Set runs conntrackd with o, the whole desired state: nil stops it and removes its rules; the
// options it already runs with change nothing. A refusal names its field and changes nothing.
func (s *Supervisor) Set(ctx context.Context, o *Options) error {
	s.setMu.Lock()
	defer s.setMu.Unlock()
	switch {
	case o == nil:
		return s.stop(ctx)
	case s.closed:
		return errors.New("conntrackd: the supervisor has stopped")
	case s.cur != nil && s.cur.want.Equal(o):
		return nil
	}
	if err := o.Check(); err != nil {
		return err
	}
	var st *settled
	if err := inNamespace(s.ns, func() (err error) { st, err = settle(o); return err }); err != nil {
		return err
	}
	text, err := Render(st.opts)
	if err != nil {
		return err
	}
	dir, err := s.lockDir(o.StateDir)
	if err != nil {
		return err
	}
	tmp := st.opts.ConfigPath() + ".new"
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		s.unlockDir(dir)
		return fmt.Errorf("sync: writing conntrackd's configuration: %w", err)
	}
	if err := s.guardTable(ctx, &st.guard); err != nil {
		os.Remove(tmp)
		s.unlockDir(dir)
		return err
	}
	if err := os.Rename(tmp, st.opts.ConfigPath()); err != nil {
		os.Remove(tmp)
		s.unlockDir(dir)
		s.restoreGuard()
		return fmt.Errorf("sync: writing conntrackd's configuration: %w", err)
	}
	s.stopInstance()
	if dir != s.dir {
		s.unlockDir(s.dir)
		s.dir = dir
	}
	s.start(o, st)
	return nil
}

// restoreGuard puts the running instance's guard back (none running: removes the table), after a
// Set wrote its own and then failed: a refused Set changes nothing.
func (s *Supervisor) restoreGuard() {
	var g *guard
	if s.cur != nil {
		g = &s.cur.guard
	}
	if err := s.guardTable(context.Background(), g); err != nil {
		s.log.Error("conntrackd: putting the guard of its port back", "err", err)
	}
}

// shutdown stops conntrackd for good.
func (s *Supervisor) shutdown() error {
	s.setMu.Lock()
	defer s.setMu.Unlock()
	s.closed = true
	return s.stop(context.Background())
}

// stop stops conntrackd and removes its rules and configuration file.
func (s *Supervisor) stop(ctx context.Context) error {
	if s.cur == nil {
		return nil
	}
	path := s.cur.opts.ConfigPath()
	s.stopInstance()
	s.setStatus(func(st *Status) {
		*st = Status{Reason: "sync is off", Restarts: st.Restarts, CPUSeconds: s.cpuEnded.Seconds()}
	})
	err := s.guardTable(ctx, nil)
	os.Remove(path)
	s.unlockDir(s.dir)
	s.dir = nil
	return err
}

// lockDir creates dir and takes its supervisor lock, unless this Supervisor holds it already.
func (s *Supervisor) lockDir(dir string) (*os.File, error) {
	if s.dir != nil && filepath.Dir(s.dir.Name()) == dir {
		return s.dir, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("sync: conntrackd's state directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, supervisorLockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("sync: conntrackd's state directory: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fieldErr("sync", "conntrackd's state directory %s is in use by another Sluice daemon (%v)", dir, err)
	}
	return f, nil
}

// unlockDir releases a lock lockDir took, unless it is the current directory's.
func (s *Supervisor) unlockDir(f *os.File) {
	if f != nil && (f != s.dir || s.cur == nil) {
		f.Close()
	}
}

// start runs a new instance for the settled options.
func (s *Supervisor) start(want *Options, st *settled) {
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{want: want.Clone(), opts: st.opts, guard: st.guard, cancel: cancel, exited: make(chan struct{}),
		initialized: make(chan struct{}, 1)}
	s.cur = in
	s.setStatus(func(status *Status) { status.Options = st.opts.Clone() })
	go s.run(ctx, in)
}

// stopInstance stops the current instance and waits for its process to end.
func (s *Supervisor) stopInstance() {
	if s.cur == nil {
		return
	}
	s.cur.cancel()
	<-s.cur.exited
	s.cur = nil
}

// run starts conntrackd for in, and again with a growing backoff whenever it exits, until ctx
// ends. Its thread stays in the namespace and ends with it: conntrackd, started from it, gets
// SIGKILL if the thread (the daemon) dies.
func (s *Supervisor) run(ctx context.Context, in *instance) {
	defer close(in.exited)
	runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
	if err := netns.Set(s.ns); err != nil {
		s.setStatus(func(st *Status) { st.Reason = "entering the network namespace: " + err.Error() })
		return
	}
	backoff := minBackoff
	for first := true; ; first = false {
		started := time.Now()
		reason := s.runOnce(ctx, in, first)
		if ctx.Err() != nil {
			return
		}
		if l := s.lapse(); l.Stopped != nil {
			l.Stopped(time.Now())
		}
		if time.Since(started) > healthyRun {
			backoff = minBackoff
		}
		s.log.Error("conntrackd: not running; restarting", "reason", reason, "in", backoff)
		s.setStatus(func(st *Status) {
			st.Running, st.PID, st.Since, st.Reason, st.RestartAt = false, 0, time.Now(), reason, time.Now().Add(backoff)
		})
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// runOnce starts conntrackd and supervises it until it exits (the reason is returned) or ctx
// ends (it is stopped).
func (s *Supervisor) runOnce(ctx context.Context, in *instance, first bool) string {
	// The Supervisor holds the state directory: a lock or socket left by a process that died
	// is stale, and conntrackd would refuse to start over it.
	os.Remove(in.opts.LockPath())
	os.Remove(in.opts.SocketPath())
	select { // a signal of the previous process's
	case <-in.initialized:
	default:
	}
	logs := &logLines{log: s.log, onLine: func(line string) {
		if strings.Contains(line, initializedLine) {
			signal(in.initialized)
		}
	}}
	cmd := exec.Command(in.opts.Binary, "-C", in.opts.ConfigPath())
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.Env = childEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return "starting: " + err.Error()
	}
	pid := cmd.Process.Pid
	s.log.Info("conntrackd: started", "pid", pid, "config", in.opts.ConfigPath())
	s.setStatus(func(st *Status) {
		st.Running, st.PID, st.Since, st.Reason, st.RestartAt = true, pid, time.Now(), "", time.Time{}
		st.Stats, st.StatsError = Stats{}, ""
		if !first {
			st.Restarts++
		}
	})
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		select {
		case err := <-waited:
			s.ended(cmd.ProcessState)
			return fmt.Sprintf("exited (%v): %s", err, logs.lastLine())
		case <-ctx.Done():
			terminate(pid, waited)
			s.ended(cmd.ProcessState)
			return "stopped"
		case <-in.initialized:
			s.timeShared(pid)
			if l := s.lapse(); !first && l.Restarted != nil {
				l.Restarted()
			}
		case <-tick.C:
			s.poll(ctx, in, pid)
		}
	}
}

// signal wakes c's reader, unless it has a wake-up pending already.
func signal(c chan<- struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// timeShared moves conntrackd from the real-time scheduling it gives itself (SCHED_RR at the
// highest priority, which its configuration cannot turn off) to the normal one. In real time it
// preempts every other task (ksoftirqd, the balancer's workers, the daemon) at each conntrack
// event and sends 1.6 events per packet; time-shared, it finds them queued in its netlink
// socket (which grows up to NetlinkBufferSizeMaxGrowth; an overrun resyncs with the kernel
// table) and sends 4.4 per packet: half the CPU per replicated connection (measured), for a
// replication later by the scheduler's latency (milliseconds), not by a polling interval.
func (s *Supervisor) timeShared(pid int) {
	if err := unix.SchedSetAttr(pid, &unix.SchedAttr{Policy: unix.SCHED_NORMAL}, 0); err != nil {
		s.log.Warn("conntrackd: leaving real-time scheduling", "pid", pid, "err", err)
	}
}

// terminate stops conntrackd's process group: SIGTERM, then SIGKILL after stopGrace.
func terminate(pid int, waited <-chan error) {
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-waited:
		return
	case <-time.After(stopGrace):
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	<-waited
}

// ended adds the CPU time of an exited conntrackd process (nil: it never ran) to cpuEnded.
func (s *Supervisor) ended(ps *os.ProcessState) {
	if ps == nil {
		return
	}
	s.setStatus(func(st *Status) {
		s.cpuEnded += ps.UserTime() + ps.SystemTime()
		st.CPUSeconds = s.cpuEnded.Seconds()
	})
}

// poll reads conntrackd's statistics, its CPU time (process pid) and the rules' counter.
func (s *Supervisor) poll(ctx context.Context, in *instance, pid int) {
	out, err := client(ctx, in.opts, "-s")
	var stats Stats
	if err == nil {
		stats, err = ParseStats(out)
	}
	drops, derr := foreignDrops(ctx)
	cpu, cerr := processCPU(pid)
	s.setStatus(func(st *Status) {
		st.Stats, st.StatsError = stats, ""
		if err != nil {
			st.StatsError = err.Error()
		}
		if derr == nil {
			st.ForeignDrops = drops
		}
		if cerr == nil {
			st.CPUSeconds = (s.cpuEnded + cpu).Seconds()
		}
	})
}

// Status is conntrackd's health now.
func (s *Supervisor) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.status
	st.Options = st.Options.Clone()
	if !st.Running && !st.RestartAt.IsZero() {
		st.Reason = fmt.Sprintf("%s; restarting in %s", st.Reason, time.Until(st.RestartAt).Round(time.Second))
	}
	return st
}

// processCPU is the CPU time (user and system) process pid has used.
func processCPU(pid int) (time.Duration, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, err
	}
	st, err := p.Stat()
	if err != nil {
		return 0, err
	}
	return time.Duration(st.CPUTime() * float64(time.Second)), nil
}

func (s *Supervisor) setStatus(f func(*Status)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.status)
}
