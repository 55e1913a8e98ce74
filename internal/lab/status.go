package lab

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/vishvananda/netlink"
)

// Status is a snapshot of a lab: its namespaces and backend processes, and a fleet's router and
// balancers.
type Status struct {
	Prefix     string
	StateDir   string
	Namespaces []NamespaceStatus
	Backends   []BackendStatus
	Router     *RouterStatus    // nil unless the lab is a fleet
	Balancers  []BalancerStatus // a fleet's only
}

// RouterStatus describes a fleet's router; a BIRD pid of 0 means BIRD is not running.
type RouterStatus struct {
	NS      string
	BirdPID int
	Socket  string
}

// BalancerStatus describes a fleet balancer; a keepalived pid of 0 means none runs.
type BalancerStatus struct {
	Index         int
	NS            string
	Front4        netip.Addr
	Back4         netip.Addr
	KeepalivedPID int
}

// NamespaceStatus tells whether a namespace exists and which global addresses it has.
type NamespaceStatus struct {
	Name   string
	Exists bool
	Addrs  []IfAddr
}

// IfAddr is an address configured on an interface.
type IfAddr struct {
	Dev    string
	Prefix netip.Prefix
}

// String formats the address as dev=prefix.
func (a IfAddr) String() string { return a.Dev + "=" + a.Prefix.String() }

// BackendStatus describes one backend; a pid of 0 means the process is not running.
type BackendStatus struct {
	Index    int
	NS       string
	Addr4    netip.Addr
	Addr6    netip.Addr
	NginxPID int
	UDPPID   int
}

// Status reports which lab namespaces exist (including stray ones named like
// the lab's), their addresses, and whether the backend processes (and a
// fleet's BIRD and keepalived) run. It describes the lab as built, whatever
// l.Backends and l.Balancers say.
func (l *Lab) Status(ctx context.Context) (Status, error) {
	if err := l.validate(); err != nil {
		return Status{}, err
	}
	if backends, balancers := l.builtShape(); backends > 0 && (backends != l.Backends || balancers != l.Balancers) {
		built := *l
		built.Backends, built.Balancers = backends, balancers
		l = &built
	}
	s := Status{Prefix: l.Prefix, StateDir: l.StateDir}
	existing, err := l.labNamespaces()
	if err != nil {
		return s, err
	}
	names := l.Namespaces()
	for _, ns := range existing {
		if !slices.Contains(names, ns) {
			names = append(names, ns)
		}
	}
	for _, ns := range names {
		if err := ctx.Err(); err != nil {
			return s, err
		}
		st := NamespaceStatus{Name: ns, Exists: slices.Contains(existing, ns)}
		if st.Exists {
			if st.Addrs, err = nsAddrs(ns); err != nil {
				return s, err
			}
		}
		s.Namespaces = append(s.Namespaces, st)
	}
	for i := 1; i <= l.Backends; i++ {
		s.Backends = append(s.Backends, BackendStatus{
			Index: i, NS: l.BackendNS(i),
			Addr4: l.BackendAddr(i, false), Addr6: l.BackendAddr(i, true),
			NginxPID: l.nginxPid(i), UDPPID: l.udpPid(i),
		})
	}
	if l.fleet() {
		s.Router = &RouterStatus{NS: l.RouterNS(), BirdPID: l.birdPid(), Socket: l.BirdSocket()}
		for i := 1; i <= l.Balancers; i++ {
			s.Balancers = append(s.Balancers, BalancerStatus{
				Index: i, NS: l.BalancerNSOf(i),
				Front4: l.BalancerFrontAddr(i, false), Back4: l.BalancerBackSideAddr(i, false),
				KeepalivedPID: l.keepalivedPid(i),
			})
		}
	}
	return s, nil
}

// nsAddrs lists the global-scope addresses of every link in ns.
func nsAddrs(ns string) ([]IfAddr, error) {
	var out []IfAddr
	err := WithHandle(ns, func(h *netlink.Handle) error {
		links, err := h.LinkList()
		if err != nil {
			return err
		}
		for _, link := range links {
			addrs, err := h.AddrList(link, netlink.FAMILY_ALL)
			if err != nil {
				return err
			}
			for _, a := range addrs {
				ip, ok := netip.AddrFromSlice(a.IP)
				if !ok || a.Scope != int(netlink.SCOPE_UNIVERSE) {
					continue
				}
				bits, _ := a.Mask.Size()
				out = append(out, IfAddr{Dev: link.Attrs().Name, Prefix: netip.PrefixFrom(ip.Unmap(), bits)})
			}
		}
		return nil
	})
	return out, err
}

// Ready reports whether every expected namespace exists and every nginx (and a fleet's BIRD) runs.
func (s Status) Ready() bool {
	if s.Router != nil && s.Router.BirdPID == 0 {
		return false
	}
	for _, ns := range s.Namespaces {
		if !ns.Exists {
			return false
		}
	}
	for _, b := range s.Backends {
		if b.NginxPID == 0 {
			return false
		}
	}
	return len(s.Namespaces) > 0
}

// String renders the status as two small tables.
func (s Status) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "lab %s (state %s)\n", s.Prefix, s.StateDir)
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAMESPACE\tEXISTS\tADDRESSES")
	for _, ns := range s.Namespaces {
		addrs := make([]string, len(ns.Addrs))
		for i, a := range ns.Addrs {
			addrs[i] = a.String()
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", ns.Name, yesNo(ns.Exists), strings.Join(addrs, " "))
	}
	w.Flush()
	b.WriteString("\n")
	w = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "BACKEND\tNAMESPACE\tIPV4\tIPV6\tNGINX\tUDP")
	for _, be := range s.Backends {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", BackendName(be.Index), be.NS, be.Addr4, be.Addr6, pidState(be.NginxPID), pidState(be.UDPPID))
	}
	w.Flush()
	if s.Router == nil {
		return b.String()
	}
	b.WriteString("\n")
	w = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ROUTER\tNAMESPACE\tBIRD\tSOCKET")
	fmt.Fprintf(w, "router\t%s\t%s\t%s\n", s.Router.NS, pidState(s.Router.BirdPID), s.Router.Socket)
	w.Flush()
	b.WriteString("\n")
	w = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "BALANCER\tNAMESPACE\tFRONT\tBACK\tKEEPALIVED")
	for _, lb := range s.Balancers {
		fmt.Fprintf(w, "lb%d\t%s\t%s\t%s\t%s\n", lb.Index, lb.NS, lb.Front4, lb.Back4, pidState(lb.KeepalivedPID))
	}
	w.Flush()
	return b.String()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func pidState(pid int) string {
	if pid == 0 {
		return "stopped"
	}
	return fmt.Sprintf("pid %d", pid)
}
