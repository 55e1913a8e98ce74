// Package nft is Sluice's nftables datapath: an inet table for nat and fullnat (DNAT through
// conntrack, so established flows keep their backend) and a netdev table for dsr, both laid out
// like nftlb's (a verdict map keyed by proto . vip . port, one chain per service) and changed by
// atomic transactions holding only the difference: one, or several of whole services when the
// difference is too big for one nft process.
//
// A plan goes through Apply in one direction, a file per stage:
//
//   - check: budget.go (the elements the plan needs), the host's checks (kernel.go);
//   - render: desired.go (renderPlan: what is new since the last commit), render.go (renderBase,
//     then renderService per service: its protection, protect.go, then its mode's chains and
//     maps), with second chance (secondchance.go), names (names.go) and states (state.go) as
//     helpers;
//   - compare: desired.go (changes, against the committed state) or the tables as read back
//     (kernel.go, netlinkread.go);
//   - batch: batches.go; reconcile: reconcile.go (and secondchance.go's prev elements);
//   - run: the datapath's knftables.Interface (script.go's scriptRunner on the machine, knftables'
//     fake in the unit tests), then commit (nft.go).
package nft

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"sigs.k8s.io/knftables"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/plan"
)

// Datapath programs plans through nft in the current network namespace.
type Datapath struct {
	nft   knftables.Interface // runs the transactions spanning both tables (scriptRunner on the machine)
	flows elementLister       // the netdev table, whose dsr flow maps are listed one by one
	host  host                // the rest of what Apply asks of the machine (kernelHost on the machine)
	log   *slog.Logger
	// maxOps bounds the operations of one transaction (maxBatchOperations; see batches).
	maxOps int

	mu sync.Mutex
	// committed is what the last successful Apply left in the kernel; nil when that is not
	// known (first use, a failed transaction, Flush, or a Resync that found another transaction
	// since): the next Apply reads the kernel.
	committed *desired
	// generation is the ruleset generation at which the kernel's tables held committed exactly
	// (0: not known). A Resync that finds the ruleset still at it needs no read of the tables.
	generation uint32
	// resync asks the next Apply to check the generation and the routes to dsr backends.
	resync bool
	// own are the ruleset generations Sluice's latest transactions made, so that the watcher
	// never takes them for someone else's, even when generation is not known.
	own []uint32
	// layout is what the last successful Apply committed, kept through Resync and failed
	// transactions, for Status to read without the lock; nil before the first Apply and after Flush.
	layout atomic.Pointer[desired]
}

var (
	_ datapath.Datapath      = (*Datapath)(nil)
	_ datapath.ServiceReader = (*Datapath)(nil)
	_ datapath.Budgeter      = (*Datapath)(nil)
)

// New checks that nft runs here and returns the datapath. It makes no knftables.Interface
// before one lists elements: knftables.New checks nft with a commented table, for which nft 1.0.6
// reads every object of the ruleset (a second at 10,000 services), and a one-shot apply of one
// change must not pay for the whole table (scriptRunner builds transactions without one).
func New(log *slog.Logger) (*Datapath, error) {
	if out, err := exec.Command("nft", "--version").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("nftables: nft --version: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return newDatapath(scriptRunner{knftables.NewFake("", "")}, &netdevLister{}, kernelHost{}, log), nil
}

// elementLister lists the elements of a set or map of Sluice's netdev table.
type elementLister interface {
	ListElements(ctx context.Context, objectType, name string) ([]*knftables.Element, error)
}

// netdevLister is the elementLister on the machine: knftables' interface of the netdev table,
// made on first use.
type netdevLister struct {
	once sync.Once
	nft  knftables.Interface
	err  error
}

func (l *netdevLister) ListElements(ctx context.Context, objectType, name string) ([]*knftables.Element, error) {
	l.once.Do(func() { l.nft, l.err = knftables.New(knftables.NetDevFamily, TableName) })
	if l.err != nil {
		return nil, fmt.Errorf("nftables: %w", l.err)
	}
	return l.nft.ListElements(ctx, objectType, name)
}

// newDatapath is a datapath running its transactions through nft and asking the rest of host.
func newDatapath(nft knftables.Interface, flows elementLister, h host, log *slog.Logger) *Datapath {
	return &Datapath{nft: nft, flows: flows, host: h, log: log, maxOps: maxBatchOperations}
}

var _ datapath.ForwardingChecker = (*Datapath)(nil)

// CheckForwarding refuses a plan whose nat or fullnat services need forwarding that the
// namespace has off: the stack forwards them after the nat hooks (dsr's fwd does not need it).
func (d *Datapath) CheckForwarding(p *plan.Plan) error { return datapath.CheckForwarding(p) }

// Apply programs the plan in one transaction holding only what differs from the state it last
// committed (in several of whole services when that is too big, see run): it renders only the
// services whose plan changed and leaves the others alone. When that state is not known it renders
// everything and compares with the kernel's.
func (d *Datapath) Apply(ctx context.Context, p *plan.Plan) error {
	if err := d.Budget(p); err != nil {
		return err
	}
	if err := d.host.check(p); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	env, err := d.host.environment(p.Interfaces)
	if err != nil {
		return err
	}
	if created, err := d.host.ensureCTTimeouts(ctx); err != nil {
		return err
	} else if created {
		d.recordOwn(d.host.generation()) // the watcher must not take it for someone else's
	}
	gen := d.host.generation()
	// exact: the kernel's tables hold committed, as of gen (or are read below, after gen).
	exact := d.committed != nil && gen != 0 && d.generation == gen
	recheckRoutes := false
	if d.resync {
		d.resync = false
		if exact {
			recheckRoutes = true
		} else {
			d.committed = nil
		}
	}
	next, err := renderPlan(p, env, d.committed, recheckRoutes)
	if err != nil {
		return err
	}
	if d.committed == nil {
		exact = gen != 0
	}
	have, want, err := d.transition(ctx, next)
	if err != nil {
		return err
	}
	next.release()
	if have, err = d.withSecondChances(have, want); err != nil {
		return err
	}
	n, txs, err := d.run(ctx, have, want)
	if err != nil {
		d.committed, d.generation = nil, 0
		return err
	}
	if n == 0 {
		d.log.Debug("nft: kernel already matches the plan")
		d.commit(next, exact, gen)
		return nil
	}
	after := d.host.generation()
	d.commit(next, exact && after == gen+uint32(txs), after) // +txs: ours were the only transactions since gen
	return nil
}

// transition returns the states Apply reconciles to reach next: the changed part of what was
// committed and of next, or the kernel's current state and all of next.
func (d *Datapath) transition(ctx context.Context, next *desired) (have, want *state, err error) {
	if d.committed != nil {
		return d.committed.changes(next)
	}
	if have, err = d.read(ctx); err != nil {
		return nil, nil, err
	}
	want, err = next.all()
	return have, want, err
}

// run reconciles have into want in one transaction, or in several when the change is too big for
// one nft process (see batches), and returns the operations and transactions it ran. A rejected
// transaction's error names its batch and the services it was changing.
func (d *Datapath) run(ctx context.Context, have, want *state) (ops, txs int, err error) {
	parts := batches(have, want, d.maxOps)
	for i, part := range parts {
		cs := &changeSet{}
		n := reconcile(cs, part.have, part.want)
		if n == 0 {
			continue
		}
		d.log.Info("nft: applying", "operations", n, "batch", i+1, "batches", len(parts))
		if err := d.write(ctx, cs); err != nil {
			which := "nft transaction"
			if len(parts) > 1 {
				which += fmt.Sprintf(" %d of %d", i+1, len(parts))
			}
			which += fmt.Sprintf(" (%s, %d operations)", changing(part.services), n)
			if txs == 0 {
				return ops, txs, fmt.Errorf("%s rejected, nothing changed: %w", which, err)
			}
			return ops, txs, fmt.Errorf("%s rejected after %d applied (each holds whole services); the next apply reads the kernel and completes the change: %w",
				which, txs, err)
		}
		ops += n
		txs++
		d.recordOwn(d.host.generation())
	}
	return ops, txs, nil
}

// write commits cs: as one netlink batch when the host encodes every operation of it, else
// through nft.
func (d *Datapath) write(ctx context.Context, cs *changeSet) error {
	written, why, err := d.host.write(cs)
	if written {
		d.log.Debug("nft: written over netlink", "operations", cs.NumOperations())
		return err
	}
	d.log.Debug("nft: written through nft", "operations", cs.NumOperations(), "because", why)
	tx := d.nft.NewTransaction()
	cs.replay(tx)
	return d.nft.Run(ctx, tx)
}

// changing says which services a transaction changes: the first few by name.
func changing(services []string) string {
	const named = 5
	switch {
	case len(services) == 0:
		return "shared objects only"
	case len(services) > named:
		return fmt.Sprintf("services %s and %d more", strings.Join(services[:named], ", "), len(services)-named)
	default:
		return "services " + strings.Join(services, ", ")
	}
}

// recordOwn remembers that Sluice's transaction made generation gen (0: unknown), among the last 64.
func (d *Datapath) recordOwn(gen uint32) {
	if gen == 0 {
		return
	}
	if len(d.own) == 64 {
		d.own = d.own[1:]
	}
	d.own = append(d.own, gen)
}

var _ datapath.TableSharer = (*Datapath)(nil)

// Beside runs commit (one transaction on a table of the caller's own, not Sluice's) and keeps
// the committed state exact across it, when its transaction was the only one since the state's
// generation: the tables are as committed, one generation later. Anything else in between
// leaves the state to the next resync's read-back, as without Beside.
func (d *Datapath) Beside(commit func() (bool, error)) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	before := d.host.generation()
	committed, err := commit()
	if committed && d.generation != 0 && d.generation == before {
		if after := d.host.generation(); after == before+1 {
			d.generation = after
		}
	}
	return err
}

// commit records next as what the kernel holds, exactly so at ruleset generation gen when exact.
func (d *Datapath) commit(next *desired, exact bool, gen uint32) {
	d.committed, d.generation = next, 0
	if exact {
		d.generation = gen
	}
	d.layout.Store(next)
}

// Resync makes the next Apply repair what others changed in Sluice's tables and follow moved
// routes to dsr backends. When no transaction ran since the last commit (the ruleset's generation
// says so), the tables are as committed and only the routes are looked up again; otherwise the
// next Apply renders every service and compares with the tables as read from the kernel.
func (d *Datapath) Resync() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.resync = true
}

// Flush deletes Sluice's tables, each whole (with its chains, maps, counters and policies), in
// one transaction; none when there is no table. It reads none of their content.
func (d *Datapath) Flush(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.committed, d.generation = nil, 0
	d.layout.Store(nil)
	have, err := d.host.tables()
	if err != nil {
		return err
	}
	tx := d.nft.NewTransaction()
	for _, f := range families {
		if have[f] {
			tx.Delete(&knftables.Table{Family: f, Name: TableName})
		}
	}
	if tx.NumOperations() == 0 {
		return nil
	}
	return d.nft.Run(ctx, tx)
}

// Status reads the programmed services back, with per-backend counters and active flows. A
// datapath that has committed a plan (the daemon's) takes the services' layout from that plan
// and reads only their counters (over netlink) and live flows from the kernel, without waiting
// for an Apply in progress, so that a metrics scrape never lists the tables; a one-shot command
// lists Sluice's tables. (The periodic resync repairs what someone else changed in them.)
func (d *Datapath) Status(ctx context.Context) ([]datapath.ServiceStatus, error) {
	plans, known := d.committedPlans()
	if !known {
		return d.readStatus(ctx)
	}
	return d.statusOf(ctx, plans)
}

// ServiceStatus reads one service back as Status does, at a cost that does not grow with the
// number of services when the datapath knows what it committed.
func (d *Datapath) ServiceStatus(ctx context.Context, name string) (datapath.ServiceStatus, bool, error) {
	plans, known := d.committedPlans(name)
	var all []datapath.ServiceStatus
	var err error
	if known {
		all, err = d.statusOf(ctx, plans)
	} else {
		all, err = d.readStatus(ctx)
	}
	if err != nil {
		return datapath.ServiceStatus{}, false, err
	}
	for _, s := range all {
		if s.Name == name {
			return s, true, nil
		}
	}
	return datapath.ServiceStatus{}, false, nil
}

// committedPlans returns the plans of the named services (every service when none is named) as
// last committed; known is false when what was committed is not known.
func (d *Datapath) committedPlans(names ...string) (plans []plan.Service, known bool) {
	layout := d.layout.Load()
	if layout == nil {
		return nil, false
	}
	if len(names) == 0 {
		names = slices.Collect(maps.Keys(layout.services))
	}
	for _, name := range names {
		if r := layout.service(name); r != nil {
			plans = append(plans, r.service)
		}
	}
	return plans, true
}

// statusOf is the status of committed services: their layout from their plans, their counters
// and live flows from the kernel.
func (d *Datapath) statusOf(ctx context.Context, plans []plan.Service) ([]datapath.ServiceStatus, error) {
	needed := map[knftables.Family]bool{}
	src := liveSources{conntrack: map[ipv]bool{}}
	for i := range plans {
		s := &plans[i]
		needed[familyOf(s)] = true
		if s.Mode == config.ModeDSR {
			src.flowMaps = append(src.flowMaps, namesOf(s).flows)
		} else {
			src.conntrack[ipvOf(s.VIP)] = true
		}
	}
	counters := &state{counters: map[objKey]*knftables.Counter{}}
	for _, f := range families {
		if !needed[f] {
			continue
		}
		read, err := d.host.counters(f)
		if err != nil {
			return nil, err
		}
		for name, c := range read {
			counters.counters[objKey{f, name}] = c
		}
	}
	live, err := d.readLiveFlows(ctx, src)
	if err != nil {
		return nil, err
	}
	out := make([]datapath.ServiceStatus, 0, len(plans))
	for i := range plans {
		out = append(out, plannedStatus(&plans[i], counters, live))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// plannedStatus is a committed service's status as serviceStatus would read it from the tables:
// backends in the members map's order, shares from the slots, counters, and active flows (for dsr
// the flow map's elements, by backend mark).
func plannedStatus(s *plan.Service, counters *state, live *liveFlows) datapath.ServiceStatus {
	st := datapath.ServiceStatus{Name: s.Name, Protocol: s.Protocol, VIP: s.VIP.String(), Ports: s.Ports.String(),
		Mode: s.Mode, Scheduler: s.Scheduler, Slots: len(s.Slots)}
	owned := make([]int, len(s.Backends))
	for _, b := range s.Slots {
		owned[b]++
	}
	dsrActive := map[uint64]uint64{}
	if s.Mode == config.ModeDSR {
		for mark, n := range live.dsr[namesOf(s).flows] {
			if m, err := strconv.ParseUint(mark, 0, 32); err == nil {
				dsrActive[m] += n
			}
		}
	}
	marks := backendMarks(s.Backends)
	order := make([]string, len(s.Backends)) // the members element of each backend, which orders them
	for i, b := range s.Backends {
		bs := datapath.BackendStatus{Address: b.Addr.String(), Port: int(b.Port), Weight: b.Weight}
		bs.Flows, bs.Packets, bs.Bytes = backendCounters(counters, familyOf(s), string(s.Mode), s.Name, b.ID())
		if len(s.Slots) > 0 {
			bs.Share = float64(owned[i]) / float64(len(s.Slots))
		}
		if s.Mode == config.ModeDSR {
			bs.ActiveFlows = dsrActive[uint64(marks[i])]
		} else {
			bs.ActiveFlows = live.natActive(natTargetOf(string(s.Protocol), s.VIP, s.Ports, b))
		}
		st.Backends = append(st.Backends, bs)
		order[i] = elementID(&knftables.Element{Key: []string{bs.Address, strconv.Itoa(bs.Port)}, Value: []string{strconv.Itoa(bs.Weight)}})
	}
	sort.Sort(byKeys{order, st.Backends})
	st.Refused = refusals(counters, familyOf(s), s.Name, s.VIP)
	if s.SYNProtection {
		st.SYNCookies = synCookies(counters, s.Name, s.VIP)
	}
	return st
}

// byKeys sorts backends by keys, moving both together.
type byKeys struct {
	keys     []string
	backends []datapath.BackendStatus
}

func (b byKeys) Len() int           { return len(b.keys) }
func (b byKeys) Less(i, j int) bool { return b.keys[i] < b.keys[j] }
func (b byKeys) Swap(i, j int) {
	b.keys[i], b.keys[j] = b.keys[j], b.keys[i]
	b.backends[i], b.backends[j] = b.backends[j], b.backends[i]
}

// familyOf is the table family a service is rendered in.
func familyOf(s *plan.Service) knftables.Family {
	if s.Mode == config.ModeDSR {
		return knftables.NetDevFamily
	}
	return knftables.InetFamily
}

// readStatus reads the programmed services back from Sluice's tables as nft lists them.
func (d *Datapath) readStatus(ctx context.Context) ([]datapath.ServiceStatus, error) {
	st, err := d.read(ctx)
	if err != nil {
		return nil, err
	}
	live, err := d.readLiveFlows(ctx, liveSourcesOf(st))
	if err != nil {
		return nil, err
	}
	var out []datapath.ServiceStatus
	for _, d := range dispatchedServices(st, "") {
		out = append(out, serviceStatus(st, live, d))
	}
	return out, nil
}

// serviceStatus rebuilds one service from its dispatch elements, members map, slots, counters and
// live flows.
func serviceStatus(st *state, live *liveFlows, d dispatchedService) datapath.ServiceStatus {
	f, n, vip, ports := d.family, d.names(), d.vip, d.ports
	s := datapath.ServiceStatus{Name: d.name, Protocol: d.protocol, VIP: vip.String(), Ports: ports.String(), Mode: d.mode, Scheduler: d.scheduler,
		Refused: refusals(st, f, d.name, vip), SYNCookies: synCookies(st, d.name, vip)}
	// Slots and dsr flows per backend chain (dsr ones hold marks, resolved via the marks map).
	toChain := backendChainOf(st, f, n.marks)
	owners := map[string]int{}
	if slots := st.sets[objKey{f, n.slots}]; slots != nil {
		for _, e := range slots.elems {
			owners[toChain(strings.Join(e.Value, ""))]++
			s.Slots++
		}
	}
	dsrActive := map[string]uint64{}
	for mark, flows := range live.dsr[n.flows] {
		dsrActive[toChain(mark)] += flows
	}
	members := st.sets[objKey{f, n.members}]
	if members == nil {
		return s
	}
	for _, id := range sortedIDs(members.elems) {
		e := members.elems[id]
		if len(e.Key) != 2 || len(e.Value) != 1 {
			continue
		}
		addr, err1 := netip.ParseAddr(e.Key[0])
		port, err2 := strconv.ParseUint(e.Key[1], 10, 16)
		weight, err3 := strconv.Atoi(e.Value[0])
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		pb := plan.Backend{Addr: addr, Port: uint16(port), Weight: weight}
		b := datapath.BackendStatus{Address: e.Key[0], Port: int(port), Weight: weight}
		b.Flows, b.Packets, b.Bytes = backendCounters(st, f, string(s.Mode), s.Name, pb.ID())
		bchain := backendChain(s.Name, string(s.Protocol), pb.ID(), "")
		if s.Slots > 0 {
			b.Share = float64(owners[bchain]) / float64(s.Slots)
		}
		if s.Mode == config.ModeDSR {
			b.ActiveFlows = dsrActive[bchain]
		} else {
			b.ActiveFlows = live.natActive(natTargetOf(string(s.Protocol), vip, ports, pb))
		}
		s.Backends = append(s.Backends, b)
	}
	return s
}

// backendChainOf resolves what a service's slots hold (a goto, or under dsr a backend mark
// looked up in its marks map) to the device-less name of the backend chain.
func backendChainOf(st *state, f knftables.Family, marksMap string) func(string) string {
	marks := map[string]string{}
	if m := st.sets[objKey{f, marksMap}]; m != nil {
		for _, e := range m.elems {
			marks[strings.Join(e.Key, "")] = strings.Join(e.Value, "")
		}
	}
	return func(value string) string {
		if target, ok := marks[value]; ok {
			value = target
		}
		if chain, ok := parseGoto(value); ok {
			return withoutDevice(chain)
		}
		return value
	}
}

// backendCounters reads a backend's flows, packets and bytes. The backend chain counts new flows
// under nat and fullnat (the forwarded chain counts packets, nil when it does not) and packets
// under dsr (the service chain counts new flows).
func backendCounters(st *state, f knftables.Family, mode, service, backendID string) (flows uint64, packets, bytes *uint64) {
	flowsPrefix, packetsPrefix := chainCounter, packetCounter
	if mode == "dsr" {
		flowsPrefix, packetsPrefix = newFlowCounter, chainCounter
	}
	if c := st.counters[objKey{f, counterName(flowsPrefix, service, backendID)}]; c != nil {
		flows = deref(c.Packets)
	}
	if c := st.counters[objKey{f, counterName(packetsPrefix, service, backendID)}]; c != nil {
		packets, bytes = ptr(deref(c.Packets)), ptr(deref(c.Bytes))
	}
	return flows, packets, bytes
}

func deref(v *uint64) uint64 {
	if v == nil {
		return 0
	}
	return *v
}

// ResetFlows drops the flows from a service's clients to one of its backends: conntrack entries
// in every state under nat and fullnat, flow map elements under dsr. It returns how many it dropped.
func (d *Datapath) ResetFlows(ctx context.Context, s *plan.Service, b plan.Backend) (int, error) {
	if err := d.forgetSecondChances(ctx, s, b); err != nil {
		return 0, err
	}
	if s.Mode == config.ModeDSR {
		return d.resetDSRFlows(ctx, s, b)
	}
	return resetNATFlows(s, b)
}
