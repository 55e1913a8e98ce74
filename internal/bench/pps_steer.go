package bench

// `sluice bench pps --steer`: the balancer gets CPU 1 to itself. RPS on the balancer's client-side
// veth queues each arriving frame to CPU 1, where the balancer namespace receives, balances and
// hands it on; RPS on the switch's port from the balancer queues it back to CPU 0, where the
// generator, the switch and the backends run. CPU 1's busy time is then the balancer's alone.
// trafgen cannot drive this (frames queued for the other CPU fill its socket's send buffer and it
// exits on EAGAIN); `sluice lab pps-sender` waits for room instead. XDP candidates are left out:
// a veth runs its peer's XDP program in a NAPI poll on the sending CPU, before RPS.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluicelb/sluice/internal/lab"
)

// Under --steer the generator and the rest of the path run on steerGeneratorCPU, the balancer on
// steerBalancerCPU.
const (
	steerGeneratorCPU = 0
	steerBalancerCPU  = 1
)

// switchPortFromBalancer is the switch's port whose peer is the balancer's eth1 (internal/lab).
const switchPortFromBalancer = "lb"

// steerBalancer sets the RPS masks of the balancer's eth0 and of the switch's port from the
// balancer (every receive queue), and returns what puts them back.
func steerBalancer(ctx context.Context, e *Env) (undo func() error, err error) {
	set := func(ctx context.Context, ns, dev string, cpu int) error {
		mask := "0"
		if cpu >= 0 {
			mask = strconv.FormatInt(1<<cpu, 16)
		}
		// ip netns exec mounts the namespace's own /sys for the shell.
		script := fmt.Sprintf("for q in /sys/class/net/%s/queues/rx-*; do echo %s > $q/rps_cpus || exit 1; done", dev, mask)
		if err := e.InNS(ctx, ns, "sh", "-c", script); err != nil {
			return fmt.Errorf("RPS of %s in %s: %w", dev, ns, err)
		}
		return nil
	}
	undo = func() error {
		ctx := context.WithoutCancel(ctx)
		return errors.Join(set(ctx, e.Lab.BalancerNS(), "eth0", -1), set(ctx, e.Lab.SwitchNS(), switchPortFromBalancer, -1))
	}
	if err := errors.Join(set(ctx, e.Lab.BalancerNS(), "eth0", steerBalancerCPU), set(ctx, e.Lab.SwitchNS(), switchPortFromBalancer, steerGeneratorCPU)); err != nil {
		return nil, errors.Join(err, undo())
	}
	return undo, nil
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
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	name := "cpu" + strconv.Itoa(cpu)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line) // cpuN user nice system idle iowait ...
		if len(f) < 6 || f[0] != name {
			continue
		}
		v := make([]int64, 5)
		for i := range v {
			if v[i], err = strconv.ParseInt(f[i+1], 10, 64); err != nil {
				return 0, 0, fmt.Errorf("/proc/stat %s: %w", name, err)
			}
		}
		return v[3] + v[4], v[0] + v[1], nil
	}
	return 0, 0, fmt.Errorf("/proc/stat has no %s", name)
}

// sendSteered runs `sluice lab pps-sender` on CPU 0 in the client namespace for d, to the VIP or
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
	sent0, arrived0, err := e.ppsCounters()
	if err != nil {
		return PPSSample{}, err
	}
	clock, err := startBusyClock(steerBalancerCPU)
	if err != nil {
		return PPSSample{}, err
	}
	start := time.Now()
	cmd := e.Lab.Exec(ctx, e.Lab.ClientNS(), "taskset", "-c", strconv.Itoa(steerGeneratorCPU), e.Sluice, "lab", "pps-sender",
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
