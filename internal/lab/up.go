package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/sluicelb/sluice/internal/datapath/ebpf"
	"github.com/sluicelb/sluice/internal/state"
)

// Up builds the lab and starts its backend processes. It is idempotent: a
// complete lab of the same shape is kept (missing processes are started),
// anything else is torn down and rebuilt. On failure the lab is torn down.
func (l *Lab) Up(ctx context.Context) error {
	if err := l.validate(); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("lab: needs root")
	}
	if err := l.up(ctx); err != nil {
		return errors.Join(err, l.Down(context.WithoutCancel(ctx)))
	}
	return nil
}

func (l *Lab) up(ctx context.Context) error {
	if !l.built() {
		if err := l.Down(ctx); err != nil {
			return err
		}
		if err := os.MkdirAll(l.StateDir, 0o755); err != nil {
			return err
		}
		if err := l.build(); err != nil {
			return fmt.Errorf("lab: build topology: %w", err)
		}
		if err := waitOperUp(ctx, l.links()); err != nil {
			return err
		}
	}
	if err := l.writeStatic(); err != nil {
		return err
	}
	for i := 1; i <= l.Backends; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := l.StartBackend(ctx, i); err != nil {
			return err
		}
		if err := l.startUDPResponder(ctx, i); err != nil {
			return err
		}
		if l.RoutedBackends {
			if err := l.startDecap(i); err != nil {
				return err
			}
		}
	}
	if l.fleet() {
		return l.startBird(ctx)
	}
	return nil
}

// Down stops the backend processes recorded in the state dir (and a fleet's
// keepalived and BIRD), kills whatever else runs in the lab's namespaces,
// deletes every namespace named like the lab's and removes the state dir. It
// is idempotent; an ended ctx only shortens the grace period before SIGKILL.
func (l *Lab) Down(ctx context.Context) error {
	if err := l.validate(); err != nil {
		return err
	}
	var errs []error
	for _, i := range l.stateDirIndexes("b") {
		errs = append(errs, l.stopNginx(ctx, i), l.stopUDPResponder(ctx, i))
	}
	for _, i := range l.stateDirIndexes("lb") {
		errs = append(errs, l.stopKeepalived(ctx, i))
	}
	errs = append(errs, l.stopBird(ctx))
	names, err := l.labNamespaces()
	errs = append(errs, err)
	for _, ns := range names {
		pids, err := nsPids(ns)
		if err == nil && len(pids) > 0 {
			err = terminate(ctx, pids, func(pid int) bool { return running(pid, "") })
		}
		// What an ebpf balancer in the namespace pinned outlives the namespace otherwise, as do
		// the files sluice keeps for it (running config, last apply).
		errs = append(errs, err, deleteNS(ns), os.RemoveAll(ebpf.NetnsPinPath(ns)), os.RemoveAll(filepath.Dir(state.NetnsPath(ns))))
	}
	errs = append(errs, os.RemoveAll(l.StateDir))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("lab: down: %w", err)
	}
	return nil
}

// stateDirIndexes lists the i of the state dir's {kind}{i} directories (backends, balancers).
func (l *Lab) stateDirIndexes(kind string) []int {
	dirs, _ := filepath.Glob(filepath.Join(l.StateDir, kind+"[0-9]*"))
	var out []int
	for _, dir := range dirs {
		if i, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(dir), kind)); err == nil {
			out = append(out, i)
		}
	}
	return out
}

// waitOperUp waits until every link (by namespace) but lo is operationally up. A bridge port's
// carrier (and so its forwarding state) is only taken into account when linkwatch runs, up to a
// second after the link is set up; frames sent before are dropped, and the first connection of
// a fresh lab would stall for a 1 s ARP retransmission.
func waitOperUp(ctx context.Context, links map[string][]string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		var down []string
		for ns, devs := range links {
			err := WithHandle(ns, func(h *netlink.Handle) error {
				for _, dev := range devs {
					link, err := h.LinkByName(dev)
					if err != nil {
						return err
					}
					if dev != "lo" && link.Attrs().OperState != netlink.OperUp {
						down = append(down, ns+"/"+dev+"="+link.Attrs().OperState.String())
					}
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("lab: %w", err)
			}
		}
		if len(down) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("lab: links not operationally up: %v", down)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
