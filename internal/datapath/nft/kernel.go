package nft

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"sigs.k8s.io/knftables"

	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/plan"
)

var families = []knftables.Family{knftables.InetFamily, knftables.NetDevFamily}

// host is what Apply and Status ask of the machine besides transactions (the datapath's
// knftables.Interface): the plan's checks against the namespace's settings, the environment
// rendering needs, the conntrack timeout policies (which knftables cannot express), the ruleset's
// generation, the tables as they are, their counters and conntrack's entries. kernelHost is the
// machine's; the unit tests pass one over knftables' fake.
type host interface {
	// check refuses a plan the namespace's settings cannot carry (forwarding, conntrack's).
	check(p *plan.Plan) error
	// environment finds the dsr devices (configured: those) and the device towards each backend.
	environment(configured []string) (Environment, error)
	// ensureCTTimeouts creates the policies where missing and tells whether that ran a transaction.
	ensureCTTimeouts(ctx context.Context) (created bool, err error)
	// generation is the ruleset's generation; 0 when it cannot be read.
	generation() uint32
	// namespace names the network namespace for this boot (namespaceID).
	namespace() (string, error)
	// read is the current content of Sluice's tables.
	read(ctx context.Context) (*state, error)
	// tables tells which of Sluice's tables exist, without reading their content.
	tables() (map[knftables.Family]bool, error)
	// elements are the elements of one set or map of Sluice's table of family f.
	elements(f knftables.Family, set string) ([]*knftables.Element, error)
	// counters are the named counters of Sluice's table of family f, by name.
	counters(f knftables.Family) (map[string]*knftables.Counter, error)
	// conntrack is the conntrack entries of one address family.
	conntrack(family uint8) ([]ctEntry, error)
	// write commits cs itself, without nft, when it can (netlinkwrite.go); false, and why, for
	// nft to.
	write(cs *changeSet) (written bool, why string, err error)
}

// kernelHost is the host of the calling thread's network namespace.
type kernelHost struct{}

func (kernelHost) check(p *plan.Plan) error {
	if err := datapath.CheckForwarding(p); err != nil {
		return err
	}
	return checkSynproxySysctl(p)
}

func (kernelHost) environment(configured []string) (Environment, error) {
	return hostEnvironment(configured)
}

func (kernelHost) ensureCTTimeouts(ctx context.Context) (bool, error) { return ensureCTTimeouts(ctx) }

func (kernelHost) generation() uint32 { return rulesetGeneration() }

func (kernelHost) namespace() (string, error) { return namespaceID() }

func (kernelHost) read(ctx context.Context) (*state, error) { return readTables(ctx) }

func (kernelHost) tables() (map[knftables.Family]bool, error) { return existingTables() }

func (kernelHost) elements(f knftables.Family, set string) ([]*knftables.Element, error) {
	def := &setDef{obj: &knftables.Map{Family: f, Table: TableName, Name: set}, elems: map[string]*knftables.Element{}}
	if err := readElements(def, f, set); err != nil {
		return nil, err
	}
	out := make([]*knftables.Element, 0, len(def.elems))
	for _, id := range sortedIDs(def.elems) {
		out = append(out, def.elems[id])
	}
	return out, nil
}

func (kernelHost) counters(f knftables.Family) (map[string]*knftables.Counter, error) {
	return readCounters(f)
}

func (kernelHost) conntrack(family uint8) ([]ctEntry, error) { return dumpConntrack(family) }

func (kernelHost) write(cs *changeSet) (bool, string, error) { return writeChange(cs) }

// read loads the current content of Sluice's tables from the host.
func (d *Datapath) read(ctx context.Context) (*state, error) { return d.host.read(ctx) }

// readTables loads the current content of Sluice's tables from the kernel, over netlink.
func readTables(ctx context.Context) (*state, error) {
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
