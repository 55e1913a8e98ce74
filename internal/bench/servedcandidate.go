package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// servedCandidate is a Sluice candidate run by a daemon (sluice serve) rather than applied once.
// With replicates, its node replicates its flows (a sync section: the flow tables on ebpf,
// conntrackd on nft), which only a daemon does. The one balancer has no second node: it
// replicates to backend 1's address on the backends' side, where nothing listens (the datagrams
// are sent and dropped there, as a live peer would take them), and goes ahead without an initial
// sync. Against the same daemon without replication (the -served candidate), it measures what
// replicating costs the node's forwarding: the flow events, their encoding and sending,
// conntrackd's reading of conntrack's events; the daemon's own work (its health checks, its
// reads of the counters and its resync) is in both.
type servedCandidate struct {
	sluiceCandidate
	replicates bool
	daemon     *serveProcess
}

func (s *servedCandidate) Name() string {
	if s.replicates {
		return s.sluiceCandidate.Name() + "-sync"
	}
	return s.sluiceCandidate.Name() + "-served"
}

// servedReadyLimit bounds the wait for the daemon's first apply.
const servedReadyLimit = 30 * time.Second

func (s *servedCandidate) start(ctx context.Context, e *Env) error {
	dir := filepath.Join(e.Dir(), s.Name())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	secret := filepath.Join(dir, "sync.key")
	if s.replicates {
		if err := os.WriteFile(secret, []byte("bench: a secret no peer shares\n"), 0o600); err != nil {
			return err
		}
	}
	config := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(config, []byte(s.config(e, secret, dir)), 0o644); err != nil {
		return err
	}
	socket := filepath.Join(dir, "sluice.sock")
	d, err := e.startServe(e.Lab.BalancerNS(), config, socket, filepath.Join(dir, "sluice.log"))
	if err != nil {
		return err
	}
	s.daemon = d
	deadline := time.Now().Add(servedReadyLimit)
	for {
		check := exec.CommandContext(ctx, e.Sluice, "--socket", socket, "node", "check")
		if check.Run() == nil {
			return s.settle(ctx, e)
		}
		select {
		case <-d.exited:
			return errors.Join(fmt.Errorf("%s: sluice serve exited; its log is %s", s.Name(), d.log), s.stop(context.WithoutCancel(ctx), e))
		case <-ctx.Done():
			return errors.Join(ctx.Err(), s.stop(context.WithoutCancel(ctx), e))
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.Join(fmt.Errorf("%s: not ready within %s; its log is %s", s.Name(), servedReadyLimit, d.log),
				s.stop(context.WithoutCancel(ctx), e))
		}
	}
}

// Waiting for a ready daemon to go quiet: once its node is ready it may still be busy (its
// first reads of the tables and counters, conntrackd's first dump), which the first workload
// would otherwise be charged.
const (
	// settleWindow is the interval the daemon's CPU time is read over, and settleQuiet the most
	// CPU time (in clock ticks, conntrackd's included) it may take in one to count as quiet.
	settleWindow = 500 * time.Millisecond
	settleQuiet  = 1
	// settleLimit bounds the wait: a daemon that never goes quiet is measured as it is.
	settleLimit = 10 * time.Second
)

// settle waits until the daemon's process tree is quiet over a settleWindow, up to settleLimit.
func (s *servedCandidate) settle(ctx context.Context, e *Env) error {
	pids := s.pids()
	start := time.Now()
	last := treeTicks(pids)
	for time.Since(start) < settleLimit {
		select {
		case <-s.daemon.exited:
			return errors.Join(fmt.Errorf("%s: sluice serve exited once ready; its log is %s", s.Name(), s.daemon.log), s.stop(context.WithoutCancel(ctx), e))
		case <-ctx.Done():
			return errors.Join(ctx.Err(), s.stop(context.WithoutCancel(ctx), e))
		case <-time.After(settleWindow):
		}
		now := treeTicks(pids)
		if now-last <= settleQuiet {
			if waited := time.Since(start); waited > settleWindow*3/2 {
				e.Progress.Step("%s: the daemon went quiet %s after it was ready", s.Name(), waited.Truncate(100*time.Millisecond))
			}
			return nil
		}
		last = now
	}
	e.Progress.Step("%s: the daemon still busy %s after it was ready; measuring it as it is", s.Name(), settleLimit)
	return nil
}

// pids is the daemon's process: conntrackd and the daemon's other children count too.
func (s *servedCandidate) pids() []int {
	if s.daemon == nil || s.daemon.cmd.Process == nil {
		return nil
	}
	return []int{s.daemon.cmd.Process.Pid}
}

func (s *servedCandidate) stop(ctx context.Context, e *Env) error {
	if s.daemon != nil {
		s.daemon.stop()
		s.daemon = nil
	}
	return e.ResetBalancer(ctx)
}

// config is the sluiceCandidate's config, with a sync section over the backends' side when it
// replicates, its state (and conntrackd's files) under dir.
func (s *servedCandidate) config(e *Env, secret, dir string) string {
	var b strings.Builder
	b.WriteString(s.sluiceCandidate.config(e))
	if s.replicates {
		fmt.Fprintf(&b, "sync:\n  interface: eth1\n  address: %s\n  peers: [%s]\n  secret_file: %s\n  initial_sync_timeout: 0s\n",
			e.Lab.BalancerBackendSideAddr(false), e.Lab.BackendAddr(1, false), secret)
	}
	fmt.Fprintf(&b, "state: {path: %s}\n", filepath.Join(dir, "running.yaml"))
	return b.String()
}

// servedCandidates are the nat and fullnat candidates run by a daemon, with replication on and
// off, measured only when named: side by side, they show what replication costs.
func servedCandidates() []candidate {
	var out []candidate
	for _, replicates := range []bool{true, false} {
		for _, dp := range []string{"nft", "ebpf"} {
			for _, mode := range []string{"nat", "fullnat"} {
				out = append(out, &servedCandidate{sluiceCandidate: sluiceCandidate{datapath: dp, mode: mode}, replicates: replicates})
			}
		}
	}
	return out
}
