package bench

// `sluice-lab bench pps --steer`: the balancer gets CPU 1 to itself. The balancer's client-side veth
// and the switch's port from the balancer each get a NAPI instance (GRO on) polled by a kernel
// thread of its own (threaded NAPI): the balancer's thread is pinned to CPU 1, where the balancer
// namespace receives, balances (at XDP or in the stack) and hands each frame on; the switch's
// thread is pinned to CPU 0, where the generator, the switch and the backends run. CPU 1's busy
// time is then the balancer's alone, for the tc and the XDP candidates alike (RPS would leave an
// XDP program on the sender's CPU: a veth runs it in its NAPI poll, before RPS). trafgen cannot
// drive this (frames waiting for the other CPU fill its socket's send buffer and it exits on
// EAGAIN); `sluice-lab pps-sender` waits for room instead.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/lab"
	"github.com/sluicelb/sluice/internal/napi"
)

// Under --steer the generator and the rest of the path run on steerGeneratorCPU, the balancer on
// steerBalancerCPU.
const (
	steerGeneratorCPU = 0
	steerBalancerCPU  = 1
)

// steerPollers are the two veth ends whose NAPI threads --steer pins, with their CPUs: the
// balancer's receive from the generator, and the switch's receive from the balancer.
func steerPollers(e *Env) []steerPoller {
	return []steerPoller{
		{labEnd{e.Lab.BalancerNS(), "eth0"}, labEnd{e.Lab.ClientNS(), "eth0"}, steerBalancerCPU},
		{labEnd{e.Lab.SwitchNS(), "lb"}, labEnd{e.Lab.BalancerNS(), "eth1"}, steerGeneratorCPU},
	}
}

// steerPoller is a veth end whose NAPI thread runs on cpu, and the peer that sends into it.
type steerPoller struct {
	end, peer labEnd
	cpu       int
}

// steerBalancer puts the steerPollers in threaded NAPI mode and returns what puts them back. GRO
// on gives a veth its NAPI instance without XDP, and TSO off on its peer makes every frame take
// it (a veth hands a frame from a TSO-capable peer to the sending CPU's backlog instead; XDP on
// a veth turns its peer's TSO off itself). Undone: threaded and GRO off, TSO on (veth defaults).
func steerBalancer(ctx context.Context, e *Env) (undo func() error, err error) {
	threaded := func(ctx context.Context, end labEnd, on bool) error {
		// ip netns exec mounts the namespace's own /sys for the shell.
		script := fmt.Sprintf("echo %d > /sys/class/net/%s/threaded", boolInt(on), end.dev)
		if err := e.InNS(ctx, end.ns, "sh", "-c", script); err != nil {
			return fmt.Errorf("threaded NAPI on %s in %s: %w", end.dev, end.ns, err)
		}
		return nil
	}
	undo = func() error {
		ctx := context.WithoutCancel(ctx)
		var errs []error
		for _, p := range steerPollers(e) {
			errs = append(errs, threaded(ctx, p.end, false), setOffload(e, p.end, unix.ETHTOOL_SGRO, false),
				setPeerTSO(e, p.peer, true))
		}
		return errors.Join(errs...)
	}
	for _, p := range steerPollers(e) {
		err := errors.Join(setPeerTSO(e, p.peer, false), setOffload(e, p.end, unix.ETHTOOL_SGRO, true), threaded(ctx, p.end, true))
		if err != nil {
			return nil, errors.Join(err, undo())
		}
	}
	return undo, nil
}

// setPeerTSO turns TSO of end on or off; an end whose peer runs XDP has none to turn (XDP on a
// veth takes its peer's TSO away while it is attached).
func setPeerTSO(e *Env, end labEnd, on bool) error {
	if err := setOffload(e, end, unix.ETHTOOL_STSO, on); err != nil && !errors.Is(err, unix.EOPNOTSUPP) {
		return err
	}
	return nil
}

// pollerPriority is the SCHED_FIFO priority of the steered NAPI threads: the switch's must
// preempt the sender on CPU 0 as a softirq would, or its ring overflows while the sender runs.
const pollerPriority = 50

// pinPollers pins the steerPollers' NAPI threads to their CPUs (SCHED_FIFO). Attaching or removing an XDP
// program recreates a veth's NAPI instance and its thread, so this runs before every send.
func pinPollers(e *Env) error {
	for _, p := range steerPollers(e) {
		err := e.Lab.Do(p.end.ns, func() error {
			instances, err := napi.Of(p.end.dev)
			if err != nil {
				return err
			}
			if len(instances) == 0 {
				return fmt.Errorf("%s has no NAPI instance", p.end.dev)
			}
			return napi.Place(instances, p.cpu, pollerPriority)
		})
		if err != nil {
			return fmt.Errorf("NAPI thread of %s in %s: %w", p.end.dev, p.end.ns, err)
		}
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// busyClock measures how busy one CPU is: wall time less its idle and iowait time, which the
// kernel keeps exactly on a tickless CPU (/proc/stat's idle comes from the nohz idle clock), and
// less its user time. Softirq work that interrupts an idle CPU is busy time here, where the
// tick-sampled softirq column misses most of it.
type busyClock struct {
	cpu        int
	start      time.Time
	idle, user int64
}

func startBusyClock(cpu int) (*busyClock, error) {
	idle, user, err := cpuIdleUser(cpu)
	return &busyClock{cpu: cpu, start: time.Now(), idle: idle, user: user}, err
}

// cores is the busy share of the CPU since the start (1.0 = busy throughout).
func (c *busyClock) cores() (float64, error) {
	idle, user, err := cpuIdleUser(c.cpu)
	if err != nil {
		return 0, err
	}
	wall := time.Since(c.start).Seconds()
	busy := wall - float64(idle-c.idle+user-c.user)/clockTicks
	return min(1, max(0, busy/wall)), nil
}

// cpuIdleUser reads CPU cpu's idle+iowait and user+nice time from /proc/stat, in clockTicks.
func cpuIdleUser(cpu int) (idle, user int64, err error) {
	c, err := hostCPU(cpu)
	if err != nil {
		return 0, 0, err
	}
	return ticks(c.Idle, c.Iowait), ticks(c.User, c.Nice), nil
}

// sendSteered runs `sluice-lab pps-sender` on CPU 0 in the client namespace for d, to the VIP or
// (direct) to the reals in turn, and measures CPU 1's busy time.
func (e *Env) sendSteered(ctx context.Context, w ppsWorkload, direct bool, d time.Duration) (PPSSample, error) {
	lbMAC, err := macOf(e, e.Lab.BalancerNS(), "eth0")
	if err != nil {
		return PPSSample{}, err
	}
	dst := lab.VIP4
	if direct {
		var reals []string
		for _, r := range ppsRealAddrs() {
			reals = append(reals, r.String())
		}
		dst = strings.Join(reals, ",")
	}
	if err := pinPollers(e); err != nil {
		return PPSSample{}, err
	}
	sent0, arrived0, err := e.ppsCounters()
	if err != nil {
		return PPSSample{}, err
	}
	clock, err := startBusyClock(steerBalancerCPU)
	if err != nil {
		return PPSSample{}, err
	}
	start := time.Now()
	cmd := e.Lab.Exec(ctx, e.Lab.ClientNS(), "taskset", "-c", strconv.Itoa(steerGeneratorCPU), e.SluiceLab, "pps-sender",
		"--dev", "eth0", "--kind", w.name, "--dst-mac", lbMAC, "--source", ppsUDPSource, "--source-net", ppsSYNSources,
		"--dst", dst, "--port", "80", "--duration", d.String())
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 5 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		return PPSSample{}, fmt.Errorf("pps-sender: %w: %s", err, strings.TrimSpace(string(out)))
	}
	seconds := time.Since(start).Seconds()
	cores, err := clock.cores()
	if err != nil {
		return PPSSample{}, err
	}
	sent1, arrived1, err := e.ppsCounters()
	if err != nil {
		return PPSSample{}, err
	}
	return PPSSample{Seconds: seconds, Sent: sent1 - sent0, Arrived: arrived1 - arrived0, KernelCores: cores}, nil
}
