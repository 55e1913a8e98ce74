package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/datapath/ebpf"
	"github.com/sluicelb/sluice/internal/datapath/nft"
	"github.com/sluicelb/sluice/internal/datapath/split"
	"github.com/sluicelb/sluice/internal/netnslock"
	"github.com/sluicelb/sluice/internal/plan"
	"github.com/sluicelb/sluice/internal/state"
)

// newDatapath returns the datapath named like config's datapath field.
func newDatapath(name config.Datapath, cfg *config.Config, log *slog.Logger) (datapath.Datapath, error) {
	switch name {
	case config.DatapathNFT:
		return nft.New(log)
	case config.DatapathEBPF:
		opts := ebpf.Options{PinPath: pinPath()}
		if cfg != nil {
			sizes := cfg.EBPFMapSizes()
			if err := ebpf.CheckMemory(sizes, totalMemory()); err != nil {
				return nil, err
			}
			opts.Attach = ebpf.AttachMode(cfg.Attach)
			opts.Sizes = ebpf.MapSizes{Flows: uint32(sizes.MaxFlows), MaglevSlots: uint32(sizes.MaglevSlots)}
		}
		if err := ebpf.MountBPFFS(); err != nil {
			return nil, err
		}
		dp, err := ebpf.New(log, opts)
		if err != nil || cfg == nil {
			return dp, err
		}
		// The kernel's synproxy answers the SYNs of the services with syn_protection: the nft
		// datapath programs them, and the BPF program leaves their packets to the stack.
		synproxy, err := nft.New(log)
		if err != nil {
			return nil, err
		}
		return split.New(dp, synproxy, func(s *plan.Service) bool { return s.SYNProtection }), nil
	}
	return nil, fmt.Errorf("unknown datapath %q", name)
}

// datapathFor returns the datapath the config selects.
func datapathFor(cfg *config.Config, log *slog.Logger) (datapath.Datapath, error) {
	return newDatapath(cfg.Datapath, cfg, log)
}

// flushOthers removes what the datapaths other than cfg's hold, so that one datapath forwards:
// after a switch from nft to ebpf, say, stale rules would otherwise still catch traffic.
func flushOthers(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	var errs []error
	for _, name := range config.Datapaths {
		if name == cfg.Datapath || name == config.DatapathNFT && cfg.Datapath == config.DatapathEBPF {
			continue // ebpf's services with syn_protection live in nft: it keeps those, and only those
		}
		dp, err := newDatapath(name, nil, log)
		if err == nil {
			err = dp.Flush(ctx)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("flushing the %s datapath: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// everyStatus reads what every datapath holds.
func everyStatus(ctx context.Context, log *slog.Logger) ([]datapath.ServiceStatus, error) {
	var all []datapath.ServiceStatus
	for _, name := range config.Datapaths {
		dp, err := newDatapath(name, nil, log)
		if err != nil {
			return nil, err
		}
		st, err := dp.Status(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s datapath: %w", name, err)
		}
		all = append(all, st...)
	}
	return all, nil
}

// flushEvery removes what every datapath holds.
func flushEvery(ctx context.Context, log *slog.Logger) error {
	return flushOthers(ctx, &config.Config{}, log)
}

// pinPath is where the ebpf datapath pins its maps and links: the default for the host's network
// namespace, a directory per namespace for one entered with --netns, so that balancers in
// several namespaces (the lab's, say) never share maps.
func pinPath() string {
	if ns := os.Getenv(enteredEnv); ns != "" {
		return ebpf.NetnsPinPath(ns)
	}
	return ebpf.DefaultPinPath
}

// statePath is the default state file (state.path): one per namespace entered with --netns, like
// pinPath, as each namespace has its own daemon.
func statePath() string {
	if ns := os.Getenv(enteredEnv); ns != "" {
		return state.NetnsPath(ns)
	}
	return state.DefaultPath
}

// lockNetns takes the lock of the network namespace this process writes (the one --netns
// entered), so that one command at a time programs its datapaths; command tells the others who
// holds it, and hint what to do instead when another does. The lock lasts until Release or the
// process's end, however it ends.
func lockNetns(command, hint string) (*netnslock.Lock, error) {
	l, err := netnslock.Acquire(netnslock.DefaultDir, command)
	var held *netnslock.HeldError
	if !errors.As(err, &held) {
		return l, err
	}
	if ns := os.Getenv(enteredEnv); ns != "" {
		held.Namespace = ns + " " + held.Namespace
	}
	return nil, fmt.Errorf("%w: %s", held, hint)
}

// totalMemory is the machine's memory in bytes (0 when it cannot be read).
func totalMemory() uint64 {
	var info unix.Sysinfo_t
	if unix.Sysinfo(&info) != nil {
		return 0
	}
	return uint64(info.Totalram) * uint64(info.Unit)
}
