package nft

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/plan"
)

// Active flows are what the datapath tracks right now. For nat and fullnat that is conntrack: an
// entry is active when it is an established TCP connection (IPVS's ActiveConn; handshakes and
// closing connections are its InActConn) or any UDP flow. For dsr it is an element of the
// service's flow map.

// natFlow is where a conntrack entry says a flow goes: the service side of its original
// direction and the backend side of its reply direction.
type natFlow struct {
	proto   uint8
	vip     netip.Addr
	vport   uint16
	backend netip.AddrPort
}

// translated tells whether the flow's destination was rewritten (DNAT): only those can be balanced.
func (f natFlow) translated() bool { return f.backend != netip.AddrPortFrom(f.vip, f.vport) }

var protoNumbers = map[string]uint8{"tcp": unix.IPPROTO_TCP, "udp": unix.IPPROTO_UDP}

// natTarget selects the flows from a service's clients to one of its backends.
type natTarget struct {
	proto   uint8
	vip     netip.Addr
	ports   config.PortList
	backend plan.Backend // Port 0: the port the client asked for
}

func natTargetOf(proto string, vip netip.Addr, ports config.PortList, b plan.Backend) natTarget {
	return natTarget{proto: protoNumbers[proto], vip: vip, ports: ports, backend: b}
}

func (t natTarget) has(f natFlow) bool {
	port := t.backend.Port
	if port == 0 {
		port = f.vport
	}
	return f.proto == t.proto && f.vip == t.vip && t.ports.Contains(int(f.vport)) &&
		f.backend == netip.AddrPortFrom(t.backend.Addr, port)
}

// liveFlows counts the active flows of every programmed service, read once per Status.
type liveFlows struct {
	nat map[natFlow]uint64           // active translated conntrack entries
	dsr map[string]map[string]uint64 // flow map name -> backend mark -> elements
}

// liveSources are where the active flows of some services are: conntrack of the IP versions
// that have nat or fullnat services, and the dsr services' flow maps.
type liveSources struct {
	conntrack map[ipv]bool
	flowMaps  []string
}

// liveSourcesOf lists the sources of the services of a state read from the tables.
func liveSourcesOf(st *state) liveSources {
	src := liveSources{conntrack: map[ipv]bool{}}
	for _, v := range []ipv{ipv4, ipv6} {
		for _, m := range dispatchMaps(v) {
			if dispatch := st.sets[objKey{knftables.InetFamily, m.Name}]; dispatch != nil && len(dispatch.elems) > 0 {
				src.conntrack[v] = true
			}
		}
	}
	for _, k := range sortedKeys(st.sets) {
		if isServiceObject(k.name, flowsMap) {
			src.flowMaps = append(src.flowMaps, k.name)
		}
	}
	return src
}

// readLiveFlows dumps conntrack for each IP version src asks for, and lists its flow maps.
func (d *Datapath) readLiveFlows(ctx context.Context, src liveSources) (*liveFlows, error) {
	live := &liveFlows{nat: map[natFlow]uint64{}, dsr: map[string]map[string]uint64{}}
	for _, v := range []ipv{ipv4, ipv6} {
		if src.conntrack[v] {
			entries, err := d.host.conntrack(conntrackFamily(v))
			if err != nil {
				return nil, err
			}
			live.addConntrack(entries)
		}
	}
	for _, name := range src.flowMaps {
		marks, err := d.flowMarks(ctx, name)
		if err != nil {
			return nil, err
		}
		live.dsr[name] = marks
	}
	return live, nil
}

// addConntrack counts the active translated entries among entries.
func (l *liveFlows) addConntrack(entries []ctEntry) {
	for _, e := range entries {
		if e.active() && e.flow.translated() {
			l.nat[e.flow]++
		}
	}
}

func (l *liveFlows) natActive(t natTarget) uint64 {
	var n uint64
	for f, count := range l.nat {
		if t.has(f) {
			n += count
		}
	}
	return n
}

// flowMarks counts the elements of a dsr flow map by backend mark.
func (d *Datapath) flowMarks(ctx context.Context, flows string) (map[string]uint64, error) {
	elems, err := d.flows.ListElements(ctx, "map", flows)
	if err != nil && !knftables.IsNotFound(err) {
		return nil, fmt.Errorf("reading map %s: %w", flows, err)
	}
	marks := map[string]uint64{}
	for _, e := range elems {
		marks[strings.Join(e.Value, "")]++
	}
	return marks, nil
}

// flowStates chooses which of a backend's conntrack entries are deleted.
type flowStates int

const (
	// everyState: every entry, established or not (on_failure: reset).
	everyState flowStates = iota
	// unestablished: every entry but established TCP connections and answered datagram flows,
	// which a new connection reusing the tuple would otherwise follow to the backend.
	unestablished
)

func (w flowStates) selects(e ctEntry) bool { return w == everyState || !e.established() }

// dropNATFlows deletes the conntrack entries of a backend's flows in the states chosen. The
// client's next packet of a deleted flow is balanced anew, and a TCP segment reaching a backend
// that does not know its connection is answered with a reset.
func dropNATFlows(s *plan.Service, b plan.Backend, states flowStates) (int, error) {
	t := natTargetOf(string(s.Protocol), s.VIP, s.Ports, b)
	family := conntrackFamily(ipvOf(s.VIP))
	entries, err := dumpConntrack(family)
	if err != nil {
		return 0, fmt.Errorf("deleting conntrack entries of %s: %w", b.ID(), err)
	}
	n, failed := 0, 0
	var first error
	for _, e := range entries {
		if !t.has(e.flow) || !states.selects(e) {
			continue
		}
		deleted, err := deleteCTEntry(family, e)
		if err != nil {
			failed++
			first = cmp.Or(first, err)
		}
		if deleted {
			n++
		}
	}
	if failed > 0 {
		return n, fmt.Errorf("deleting conntrack entries of %s: %d of %d failed: %w", b.ID(), failed, n+failed, first)
	}
	return n, nil
}

// resetNATFlows deletes every conntrack entry of a backend's flows: the established ones, and
// those a new connection reusing their tuple would follow to the backend.
func resetNATFlows(s *plan.Service, b plan.Backend) (int, error) {
	return dropNATFlows(s, b, everyState)
}

// DropStaleFlows deletes the conntrack entries of a backend's nat and fullnat flows that are not
// established (handshakes, closing and closed connections, unanswered datagram flows), which a
// new connection reusing their tuple would follow to the backend. A dsr flow map element holds no
// state to tell them apart: dsr flows are left alone.
func (d *Datapath) DropStaleFlows(_ context.Context, s *plan.Service, b plan.Backend) (int, error) {
	if s.Mode == config.ModeDSR {
		return 0, nil
	}
	return dropNATFlows(s, b, unestablished)
}

// resetAttempts bounds the retries of a dsr reset that raced with the packet path.
const resetAttempts = 3

// resetDSRFlows deletes the flow map elements that point to a backend, so the flows' next packets
// are hashed anew. It retries when the packet path re-created an element with another backend
// between the listing and the deletion.
func (d *Datapath) resetDSRFlows(ctx context.Context, s *plan.Service, b plan.Backend) (int, error) {
	i := slices.IndexFunc(s.Backends, func(x plan.Backend) bool { return x.ID() == b.ID() })
	if i < 0 {
		return 0, nil
	}
	mark := strconv.FormatUint(uint64(backendMarks(s.Backends)[i]), 10)
	var err error
	for range resetAttempts {
		var n int
		if n, err = d.deleteFlowElements(ctx, namesOf(s).flows, mark); err == nil {
			return n, nil
		}
	}
	return 0, fmt.Errorf("resetting dsr flows of %s: %w", b.ID(), err)
}

// deleteFlowElements deletes, in one transaction, the elements of a flow map that hold a mark.
// Each is added before it is deleted: an element that expired since the listing is then deleted
// all the same instead of failing the transaction.
func (d *Datapath) deleteFlowElements(ctx context.Context, flows, mark string) (int, error) {
	elems, err := d.flows.ListElements(ctx, "map", flows)
	if knftables.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	tx := d.nft.NewTransaction()
	n := 0
	for _, e := range elems {
		if strings.Join(e.Value, "") != mark {
			continue
		}
		add := &knftables.Element{Family: knftables.NetDevFamily, Table: TableName, Map: flows, Key: e.Key, Value: e.Value}
		del := *add
		del.Value = nil
		tx.Add(add)
		tx.Delete(&del)
		n++
	}
	if n == 0 {
		return 0, nil
	}
	return n, d.nft.Run(ctx, tx)
}
