package ebpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// AttachMode is where the program runs on an interface.
type AttachMode string

// The attach modes.
const (
	// AttachTC runs the program at tc ingress through a tcx link (the default): after the driver
	// built an skb, before netfilter.
	AttachTC AttachMode = "tc"
	// AttachXDP runs it at XDP (native where the driver supports it, generic otherwise).
	AttachXDP AttachMode = "xdp"
)

// attachPrograms names each mode's program in the collection.
var attachPrograms = map[AttachMode]string{AttachTC: sluiceProgSluiceTc, AttachXDP: sluiceProgSluiceXdp}

// attachment is one link of the program, open in this process.
type attachment struct {
	link    link.Link
	ifindex int
}

// attach makes the program run on exactly the target interfaces. It adopts the links an earlier
// run pinned, replacing their program in place (link.Update, atomic; the maps and so the flows
// stay) when it is not this one; attaches and pins the missing ones; and detaches the ones no
// longer wanted, also those of the other attach mode.
func (d *Datapath) attach(targets map[string]target) error {
	want := make(map[string]int, len(targets))
	for name, t := range targets {
		want[name+"-"+string(d.opts.Attach)] = t.ifindex
	}
	pins := make([]string, 0, len(want))
	for pin := range want {
		pins = append(pins, pin)
	}
	sort.Strings(pins)
	for _, pin := range pins {
		if err := d.ensureLink(pin, want[pin]); err != nil {
			return err
		}
	}
	return d.detachExcept(want)
}

// ensureLink makes sure the program runs on one interface through a link pinned as pin.
func (d *Datapath) ensureLink(pin string, ifindex int) error {
	if a := d.links[pin]; a != nil {
		if a.ifindex == ifindex {
			return nil
		}
		a.link.Close() // the interface was re-created; its link went with the old one
		delete(d.links, pin)
	}
	path := filepath.Join(d.opts.PinPath, linksDir, pin)
	l, err := link.LoadPinnedLink(path, nil)
	switch {
	case err == nil:
		adopted, err := d.adopt(l, ifindex)
		if err != nil {
			l.Close()
			return fmt.Errorf("link %s: %w", path, err)
		}
		if adopted {
			d.links[pin] = &attachment{l, ifindex}
			return nil
		}
		if err := errors.Join(l.Unpin(), l.Close()); err != nil {
			return fmt.Errorf("removing stale link %s: %w", path, err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("loading link %s: %w", path, err)
	}
	if l, err = d.attachNew(ifindex); err != nil {
		return fmt.Errorf("attaching to %s: %w", pin, err)
	}
	if err := l.Pin(path); err != nil {
		l.Close()
		return err
	}
	d.links[pin] = &attachment{l, ifindex}
	d.log.Info("ebpf: attached", "link", pin)
	return nil
}

func (d *Datapath) attachNew(ifindex int) (link.Link, error) {
	if d.opts.Attach == AttachXDP {
		return link.AttachXDP(link.XDPOptions{Program: d.prog, Interface: ifindex})
	}
	return link.AttachTCX(link.TCXOptions{Program: d.prog, Interface: ifindex, Attach: ebpf.AttachTCXIngress})
}

// adopt keeps a pinned link attached to the interface, replacing its program when it is not the
// same as this one; false when the link is stale (its interface is gone or was re-created).
func (d *Datapath) adopt(l link.Link, ifindex int) (bool, error) {
	info, err := l.Info()
	if err != nil {
		return false, err
	}
	if linkIfindex(info) != ifindex {
		return false, nil
	}
	same, err := d.runs(info.Program)
	if err != nil || same {
		return same, err
	}
	err = l.Update(d.prog)
	if errors.Is(err, unix.ENOLINK) {
		return false, nil // detached meanwhile
	}
	if err == nil {
		d.log.Info("ebpf: replaced the program of a link", "program", info.Program)
	}
	return err == nil, err
}

func linkIfindex(info *link.Info) int {
	if t := info.TCX(); t != nil {
		return int(t.Ifindex)
	}
	if x := info.XDP(); x != nil {
		return int(x.Ifindex)
	}
	return 0
}

// runs tells whether a loaded program is the same as this one: same type, instructions (the tag)
// and pinned maps, which the tag ignores. A program loaded over maps that were not all pinned (a
// pin someone removed, a map a newer version adds) is not the one running: adopting that would
// leave the link reading the old maps.
func (d *Datapath) runs(id ebpf.ProgramID) (bool, error) {
	p, err := ebpf.NewProgramFromID(id)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer p.Close()
	info, err := p.Info()
	if err != nil {
		return false, err
	}
	if info.Type != d.prog.Type() || info.Tag != d.progTag {
		return false, nil
	}
	used, _ := info.MapIDs()
	for _, m := range d.progMaps {
		if !slices.Contains(used, m) {
			return false, nil
		}
	}
	return true, nil
}

// detachExcept detaches and unpins the program's links but the wanted ones (pin name to ifindex).
func (d *Datapath) detachExcept(want map[string]int) error {
	var errs []error
	for pin, a := range d.links {
		if _, ok := want[pin]; !ok {
			errs = append(errs, unlink(a.link))
			delete(d.links, pin)
			d.log.Info("ebpf: detached", "link", pin)
		}
	}
	dir := filepath.Join(d.opts.PinPath, linksDir)
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, e := range entries {
		if _, ok := want[e.Name()]; ok {
			continue
		}
		l, err := link.LoadPinnedLink(filepath.Join(dir, e.Name()), nil)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, unlink(l))
		d.log.Info("ebpf: detached", "link", e.Name())
	}
	return errors.Join(errs...)
}

// unlink detaches a link, also when other processes hold it, and removes its pin.
func unlink(l link.Link) error { return errors.Join(l.Detach(), l.Unpin(), l.Close()) }

// closeLinks closes this process's handles on the links; pinned, they stay attached.
func (d *Datapath) closeLinks() {
	for pin, a := range d.links {
		a.link.Close()
		delete(d.links, pin)
	}
}
