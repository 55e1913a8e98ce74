// Package bench is the benchmark driver behind `sluice-lab bench`: it brings up a lab, configures
// each candidate balancer in the lab's balancer namespace, drives load from the client namespace
// and reports medians of interleaved rounds as ratios to a baseline measured in the same run.
package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/vishvananda/netlink"

	"github.com/sluicelb/sluice/internal/lab"
)

// Env is what every benchmark runs in: a lab, the sluice binary that programs its balancer and the
// sluice-lab binary that runs the lab's helpers.
type Env struct {
	Lab *lab.Lab
	// Sluice is the sluice binary run as `sluice --netns LB apply|flush` to program the balancer.
	Sluice string
	// SluiceLab is the sluice-lab binary whose hidden commands are the lab's UDP responders and
	// the pps sender.
	SluiceLab string
	Progress  *Progress
	// xdpSwitch is set while the lab's switch and hosts take frames in XDP (--switch xdp).
	xdpSwitch bool
}

// NewEnv returns an environment over a lab named prefix with the given backend count, whose
// balancer the sluice binary at path sluice programs and whose UDP responders the sluice-lab
// binary at path sluiceLab runs.
func NewEnv(prefix string, backends int, sluice, sluiceLab string, progress *Progress) *Env {
	l := lab.New(prefix, backends)
	l.UDPResponderCmd = lab.LabUDPResponder(sluiceLab)
	return &Env{Lab: l, Sluice: sluice, SluiceLab: sluiceLab, Progress: progress}
}

// Dir is the benchmark's scratch directory inside the lab's state dir (peer configs, logs).
func (e *Env) Dir() string { return filepath.Join(e.Lab.StateDir, "bench") }

// sluiceCommand runs the sluice binary inside the balancer namespace, where no daemon runs: with
// --netns, sluice asks only that namespace's daemon socket, so it programs the kernel itself.
func (e *Env) sluiceCommand(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, e.Sluice, append([]string{"--netns", e.Lab.BalancerNS()}, args...)...)
}

// ApplyConfig programs the balancer with a Sluice config (YAML text) through `sluice apply`.
func (e *Env) ApplyConfig(ctx context.Context, name, yaml string) error {
	if err := os.MkdirAll(e.Dir(), 0o755); err != nil {
		return err
	}
	path := filepath.Join(e.Dir(), name+".yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		return err
	}
	_, err := e.applyFile(ctx, path, false)
	return err
}

// applyFile runs `sluice apply -f path` in the balancer; with measure, it returns the peak
// memory of sluice and nft together (see runMeasured).
func (e *Env) applyFile(ctx context.Context, path string, measure bool) (int64, error) {
	return runMeasured(e.sluiceCommand(ctx, "apply", "-f", path), measure)
}

// ResetBalancer removes Sluice's rules from the balancer and forgets its conntrack entries, so
// no candidate inherits the flows or NAT bindings of the one before.
func (e *Env) ResetBalancer(ctx context.Context) error { return e.resetNode(ctx, e.Lab.BalancerNS()) }

// resetNode is ResetBalancer for the balancer in namespace ns, where no daemon runs.
func (e *Env) resetNode(ctx context.Context, ns string) error {
	if err := run(exec.CommandContext(ctx, e.Sluice, "--netns", ns, "flush")); err != nil {
		return err
	}
	return flushConntrack(ns)
}

// flushConntrack forgets every conntrack entry of namespace ns, both families, as conntrack -F.
func flushConntrack(ns string) error {
	err := lab.WithHandle(ns, func(h *netlink.Handle) error { return h.ConntrackTableFlush(netlink.ConntrackTable) })
	if err != nil {
		return fmt.Errorf("flush conntrack in %s: %w", ns, err)
	}
	return nil
}

// InNS runs argv to completion inside namespace ns; its output is returned only in the error.
func (e *Env) InNS(ctx context.Context, ns string, argv ...string) error {
	return run(e.Lab.Exec(ctx, ns, argv...))
}

// run runs a command made by exec.CommandContext in a process group of its own, killed whole
// when the context ends: a `sluice apply` stopped half way leaves no nft running behind it.
func run(cmd *exec.Cmd) error {
	_, err := runMeasured(cmd, false)
	return err
}

// runMeasured is run; with measure, it also returns the peak of the resident memory of cmd's
// whole process group summed (sluice, and the nft it runs), sampled every 50 ms.
func runMeasured(cmd *exec.Cmd, measure bool) (peak int64, err error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("%s: %w", strings.Join(cmd.Args, " "), err)
	}
	done := make(chan struct{})
	sampled := make(chan int64, 1)
	if measure {
		go func() { sampled <- peakGroupMemory(cmd.Process.Pid, done) }()
	} else {
		sampled <- 0
	}
	err = cmd.Wait()
	close(done)
	peak = <-sampled
	if err != nil {
		return peak, fmt.Errorf("%s: %w: %s", strings.Join(cmd.Args, " "), err, strings.TrimSpace(out.String()))
	}
	return peak, nil
}

// Median is the median of xs (the mean of the middle two for an even count), 0 for none.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
