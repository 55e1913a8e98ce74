package nft

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/vishvananda/netlink"
	"sigs.k8s.io/knftables"
)

var families = []knftables.Family{knftables.InetFamily, knftables.NetDevFamily}

// read loads the current content of Sluice's tables from the kernel.
func (d *Datapath) read(ctx context.Context) (*state, error) {
	st := newState()
	for _, f := range families {
		nft := d.tables[f]
		chains, err := nft.List(ctx, "chains")
		if knftables.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s %s: %w", f, TableName, err)
		}
		st.tables[f] = true
		for _, name := range chains {
			st.chains[objKey{f, name}] = &chainDef{chain: &knftables.Chain{Family: f, Table: TableName, Name: name}}
		}
		for _, kind := range []string{"set", "map"} {
			names, err := nft.List(ctx, kind+"s")
			if err != nil && !knftables.IsNotFound(err) {
				return nil, err
			}
			for _, name := range names {
				var obj knftables.Object = &knftables.Set{Name: name}
				if kind == "map" {
					obj = &knftables.Map{Name: name}
				}
				def := st.addSet(f, obj)
				if strings.HasPrefix(name, "flows-") {
					continue // the packet path owns a dynamic map's elements; never reconcile them
				}
				elems, err := nft.ListElements(ctx, kind, name)
				if err != nil {
					return nil, fmt.Errorf("reading %s %s: %w", kind, name, err)
				}
				for _, e := range elems {
					def.add(e)
				}
			}
		}
		counters, err := nft.ListCounters(ctx)
		if err != nil && !knftables.IsNotFound(err) {
			return nil, err
		}
		for _, c := range counters {
			// By name, not handle: knftables writes "delete counter ... handle N" without its newline.
			st.counters[objKey{f, c.Name}] = &knftables.Counter{Family: f, Table: TableName, Name: c.Name, Packets: c.Packets, Bytes: c.Bytes}
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
	if err != nil || len(routes) == 0 {
		return "", fmt.Errorf("no route to %s: %v", addr, err)
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
