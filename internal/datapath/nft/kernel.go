package nft

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"sigs.k8s.io/knftables"
)

var families = []knftables.Family{knftables.InetFamily, knftables.NetDevFamily}

// read loads the current content of Sluice's tables from the kernel, over netlink.
func (d *Datapath) read(ctx context.Context) (*state, error) {
	st := newState()
	for _, f := range families {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := readTable(st, f); err != nil && !errors.Is(err, errNoTable) {
			return nil, fmt.Errorf("reading %s %s: %w", f, TableName, err)
		}
	}
	return st, nil
}

// hostEnvironment finds the DSR ingress devices (configured, or every non-loopback device that is
// up) and the device towards each backend from the routing table.
func hostEnvironment(configured []string) (Environment, error) {
	env := Environment{DSRDevices: configured, DeviceTo: deviceTo}
	if len(configured) > 0 {
		return env, nil
	}
	links, err := netlink.LinkList()
	if err != nil {
		return env, err
	}
	for _, l := range links {
		a := l.Attrs()
		if a.Flags&net.FlagLoopback == 0 && a.Flags&net.FlagUp != 0 {
			env.DSRDevices = append(env.DSRDevices, a.Name)
		}
	}
	return env, nil
}

func deviceTo(addr netip.Addr) (string, error) {
	routes, err := netlink.RouteGet(addr.AsSlice())
	if err != nil {
		return "", fmt.Errorf("no route to %s: %w", addr, err)
	}
	if len(routes) == 0 {
		return "", fmt.Errorf("no route to %s", addr)
	}
	link, err := netlink.LinkByIndex(routes[0].LinkIndex)
	if err != nil {
		return "", err
	}
	if routes[0].Gw != nil {
		return "", fmt.Errorf("%s is not on a directly connected network (route via %s): dsr needs layer-2 adjacency", addr, routes[0].Gw)
	}
	return link.Attrs().Name, nil
}
