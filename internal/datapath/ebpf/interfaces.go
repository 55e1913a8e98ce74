package ebpf

import (
	"fmt"
	"net"

	"github.com/vishvananda/netlink"

	"github.com/sluicelb/sluice/internal/plan"
)

// target is an interface the program runs on.
type target struct {
	ifindex int
	mac     net.HardwareAddr
}

// targets are the interfaces the program runs on, by name: the ones the options name, else the
// plan's, else every non-loopback interface that is up. The program must see both the clients'
// packets and, for nat and fullnat, the backends' replies, so by default it runs everywhere; a
// packet for no VIP and no reply it knows passes at the cost of two lookups.
func (d *Datapath) targets(p *plan.Plan) (map[string]target, error) {
	names := d.opts.Interfaces
	if len(names) == 0 {
		names = p.Interfaces
	}
	out := map[string]target{}
	if len(names) > 0 {
		for _, name := range names {
			l, err := netlink.LinkByName(name)
			if err != nil {
				return nil, fmt.Errorf("interface %s: %w", name, err)
			}
			out[name] = targetOf(l)
		}
		return out, nil
	}
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("listing interfaces: %w", err)
	}
	for _, l := range links {
		if a := l.Attrs(); a.Flags&net.FlagLoopback == 0 && a.Flags&net.FlagUp != 0 {
			out[a.Name] = targetOf(l)
		}
	}
	return out, nil
}

func targetOf(l netlink.Link) target {
	return target{ifindex: l.Attrs().Index, mac: l.Attrs().HardwareAddr}
}
