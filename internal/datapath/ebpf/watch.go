package ebpf

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cilium/ebpf"

	"github.com/sluicelb/sluice/internal/datapath"
)

// Anyone with access to the BPF filesystem can remove the pins (`rm -r /sys/fs/bpf/sluice`): the
// program keeps running while this process holds it, but the next process would start from empty
// maps; anyone with CAP_NET_ADMIN can detach the program. Watch checks every watchEvery what the
// last Apply programmed: a removed pin is pinned again at once from the object this process holds
// (maps keep their entries and flows, links stay attached), and both that and a detached link are
// reported, so that the caller's Resync and Apply read everything back and attach again.

var _ datapath.Watcher = (*Datapath)(nil)

// watchEvery is how often Watch checks the pins and links: a few system calls per map and link.
const watchEvery = time.Second

// Watch starts checking the pins and links, and recounting the counted backends' connections
// (see recount); see datapath.Watcher. The checks work from any thread:
// pins are in the process's mount namespace, links are checked through their own descriptors.
func (d *Datapath) Watch(ctx context.Context, changed func(what string)) error {
	go func() {
		tick := time.NewTicker(watchEvery)
		defer tick.Stop()
		recount := time.NewTicker(recountEvery)
		defer recount.Stop()
		reported := ""
		for {
			select {
			case <-ctx.Done():
				return
			case <-recount.C:
				if err := d.recount(); err != nil {
					d.log.Warn("recounting the backends' connections", "err", err)
				}
				continue
			case <-tick.C:
			}
			what, checked := d.inspect()
			if !checked {
				continue
			}
			if what != "" && what != reported && ctx.Err() == nil {
				changed(what)
			}
			reported = what // a change the repair could not undo is reported once
		}
	}()
	return nil
}

// inspect describes what others removed or detached of what the last Apply programmed, pinning
// again what was unpinned; "" when all is in place. checked is false when an Apply or another
// call holds the datapath: the check waits for the next tick rather than for it.
func (d *Datapath) inspect() (what string, checked bool) {
	if !d.mu.TryLock() {
		return "", false
	}
	defer d.mu.Unlock()
	if d.prog == nil || d.maps == nil {
		return "", true // nothing programmed by this process (yet, or since a Flush)
	}
	var changes []string
	repin := func(path string, pin func() error) {
		err := preparePinPath(d.opts.PinPath)
		if err == nil {
			err = pin()
		}
		if err != nil {
			changes = append(changes, fmt.Sprintf("pin %s removed, pinning it again failed: %v", path, err))
		} else {
			changes = append(changes, fmt.Sprintf("pin %s removed", path))
		}
	}
	for name, m := range d.maps.byName() {
		path := filepath.Join(d.opts.PinPath, name)
		switch pinned, err := ebpf.LoadPinnedMap(path, nil); {
		case errors.Is(err, os.ErrNotExist):
			repin(path, func() error { return errors.Join(m.Unpin(), m.Pin(path)) })
		case err != nil:
			changes = append(changes, fmt.Sprintf("pin %s unreadable: %v", path, err))
		default:
			if !sameMap(pinned, m) {
				changes = append(changes, fmt.Sprintf("pin %s holds another map", path))
			}
			pinned.Close()
		}
	}
	for pin, a := range d.links {
		if info, err := a.link.Info(); err != nil || linkIfindex(info) != a.ifindex {
			changes = append(changes, fmt.Sprintf("link %s detached", pin))
			continue
		}
		path := filepath.Join(d.opts.PinPath, linksDir, pin)
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			repin(path, func() error { return errors.Join(a.link.Unpin(), a.link.Pin(path)) })
		}
	}
	return strings.Join(changes, ", "), true
}
