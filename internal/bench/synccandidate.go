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

// syncedCandidate is a Sluice candidate whose node replicates its flows (a sync section: the
// flow tables on ebpf, conntrackd on nft), run by a daemon since only a daemon replicates. The
// one balancer has no second node: it replicates to backend 1's address on the backends' side,
// where nothing listens (the datagrams are sent and dropped there, as a live peer would take
// them), and goes ahead without an initial sync. What it measures is what replicating costs the
// node's forwarding: the flow events, their encoding and sending, conntrackd's reading of
// conntrack's events.
type syncedCandidate struct {
	sluiceCandidate
	daemon *serveProcess
}

func (s *syncedCandidate) Name() string { return s.sluiceCandidate.Name() + "-sync" }

// syncReadyLimit bounds the wait for the daemon's first apply.
const syncReadyLimit = 30 * time.Second

func (s *syncedCandidate) start(ctx context.Context, e *Env) error {
	dir := filepath.Join(e.Dir(), s.Name())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	secret := filepath.Join(dir, "sync.key")
	if err := os.WriteFile(secret, []byte("bench: a secret no peer shares\n"), 0o600); err != nil {
		return err
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
	deadline := time.Now().Add(syncReadyLimit)
	for {
		check := exec.CommandContext(ctx, e.Sluice, "--socket", socket, "node", "check")
		if check.Run() == nil {
			return nil
		}
		select {
		case <-d.exited:
			return fmt.Errorf("%s: sluice serve exited; its log is %s", s.Name(), d.log)
		case <-ctx.Done():
			return errors.Join(ctx.Err(), s.stop(context.WithoutCancel(ctx), e))
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.Join(fmt.Errorf("%s: not ready within %s; its log is %s", s.Name(), syncReadyLimit, d.log),
				s.stop(context.WithoutCancel(ctx), e))
		}
	}
}

func (s *syncedCandidate) stop(ctx context.Context, e *Env) error {
	if s.daemon != nil {
		s.daemon.stop()
		s.daemon = nil
	}
	return e.ResetBalancer(ctx)
}

// config is the sluiceCandidate's config with a sync section over the backends' side, its
// state (and conntrackd's files) under dir.
func (s *syncedCandidate) config(e *Env, secret, dir string) string {
	var b strings.Builder
	b.WriteString(s.sluiceCandidate.config(e))
	fmt.Fprintf(&b, "sync:\n  interface: eth1\n  address: %s\n  peers: [%s]\n  secret_file: %s\n  initial_sync_timeout: 0s\n",
		e.Lab.BalancerBackendSideAddr(false), e.Lab.BackendAddr(1, false), secret)
	fmt.Fprintf(&b, "state: {path: %s}\n", filepath.Join(dir, "running.yaml"))
	return b.String()
}

// syncedCandidates are the candidates with replication on, measured only when named: against
// the same datapath and mode without it, they show what replication costs.
func syncedCandidates() []candidate {
	var out []candidate
	for _, dp := range []string{"nft", "ebpf"} {
		for _, mode := range []string{"nat", "fullnat"} {
			out = append(out, &syncedCandidate{sluiceCandidate: sluiceCandidate{datapath: dp, mode: mode}})
		}
	}
	return out
}
