package nft

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/knftables"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/plan"
)

// Second chance, as the ebpf datapath gives it (see docs/ha.md): when a service's table changes,
// each slot whose backend changed keeps the backend chain it had in the service's prev map, for
// the service's flow_timeout (the map's element timeout: the kernel expires them). A TCP segment
// past the SYN that has no conntrack entry here (its connection began on another node that did
// not hand it over) reaches the service chain as a new flow; the prev map sends it to the
// backend its slot had before the change, which knows the connection, rather than to the new one,
// which would reset it. A slot that did not change has no element: the lookup fails and the
// table decides, as for every other new flow.
//
// The elements are written by Apply as it changes the slots, not rendered: the read-back leaves
// them alone (packetPathKinds). A backend chain that goes away takes its service's prev elements
// with it (the map is flushed first in the same transaction: an element would hold the chain).

// givesSecondChance tells whether a service gets a prev map: TCP services whose table hashes the
// flow (maglev, hash, sh), without persistence (which remembers clients its own way).
func givesSecondChance(s *plan.Service) bool {
	switch {
	case s.Protocol != config.ProtocolTCP, s.Persistence > 0, len(s.Slots) == 0:
		return false
	case s.Scheduler == config.SchedulerRR, s.Scheduler == config.SchedulerWRR, s.Scheduler == config.SchedulerRandom:
		return false
	}
	return true
}

// midFlow matches the TCP segments that are neither a SYN nor a reset.
const midFlow = "meta l4proto tcp tcp flags & (syn | rst) == 0"

// renderSecondChance adds a nat or fullnat service's prev map (slot : backend chain) and returns
// the rule that consults it.
func renderSecondChance(st *state, s *plan.Service, n serviceNames) string {
	addPrevMap(st, knftables.InetFamily, s, n, "verdict")
	return fmt.Sprintf("%s %s vmap @%s", midFlow, selector(s), n.prev)
}

// renderDSRSecondChance adds a dsr service's prev map (slot : backend mark) and returns the rules
// that consult it: a mid-flow segment whose slot changed takes the mark its slot had, is
// remembered as a flow, and goes to that backend (the marks map holds every backend's, those that
// take no new flow included). A slot that did not change leaves the mark as it was (0) for the
// slots rule. Every rule matches mid-flow segments only: a SYN may carry the mark of a flow the
// rules before forgot (a reused port), which must not send it anywhere but to the table.
func renderDSRSecondChance(st *state, s *plan.Service, n serviceNames, flowKey string) []string {
	addPrevMap(st, knftables.NetDevFamily, s, n, "meta mark")
	return []string{
		fmt.Sprintf("%s meta mark set %s map @%s", midFlow, selector(s), n.prev),
		fmt.Sprintf("%s meta mark != 0 update @%s { %s : meta mark }", midFlow, n.flows, flowKey),
		fmt.Sprintf("%s meta mark != 0 meta mark vmap @%s", midFlow, n.marks),
	}
}

// addPrevMap adds a service's prev map, its elements living flow_timeout.
func addPrevMap(st *state, f knftables.Family, s *plan.Service, n serviceNames, value string) {
	st.addSet(f, &knftables.Map{
		Name: n.prev, TypeOf: "numgen inc mod 2 : " + value, Flags: []knftables.SetFlag{knftables.TimeoutFlag},
		Timeout: &s.FlowTimeout, Size: ptr(uint64(len(s.Slots))),
	})
}

// prevOf is the prev map of the service whose slots map is named slots.
func prevOf(slots string) string { return sibling(slots, prevMap) }

// sibling is the object of another kind of the service whose object is named name.
func sibling(name string, kind serviceKind) string {
	o, _ := parseServiceObject(name)
	o.kind = kind
	return o.String()
}

// targetStays tells whether want keeps what a slot of the slots map k held: a nat backend's
// chain ("goto be-..."), or a dsr backend's mark in the service's marks map.
func targetStays(want *state, k objKey, old string) bool {
	if chain, ok := parseGoto(old); ok {
		return want.chains[objKey{k.family, chain}] != nil
	}
	marks := want.sets[objKey{k.family, sibling(k.name, marksMap)}]
	if marks == nil {
		return false
	}
	_, ok := valuesByKey(marks)[old]
	return ok
}

// withSecondChances is have with the elements the prev maps hold of the services whose slots
// change, read from the host (addSecondChances adds none over them: nft 1.0.6 cannot replace an
// element, and adding a key that is there with another value fails the whole transaction).
// have itself, which may be the committed state's, is left as it is.
func (d *Datapath) withSecondChances(have, want *state) (*state, error) {
	out := have
	for _, k := range sortedKeys(want.sets) {
		prev := objKey{k.family, prevOf(k.name)}
		if !isServiceObject(k.name, slotsMap) || have.sets[k] == nil || have.sets[prev] == nil || want.sets[prev] == nil ||
			maps.Equal(valuesByKeyString(have.sets[k]), valuesByKeyString(want.sets[k])) {
			continue
		}
		elems, err := d.host.elements(prev.family, prev.name)
		if err != nil {
			return nil, fmt.Errorf("reading %s %s: %w", prev.family, prev.name, err)
		}
		read := &setDef{obj: have.sets[prev].obj, elems: map[string]*knftables.Element{}}
		for _, e := range elems {
			read.add(e)
		}
		if out == have {
			c := *have
			c.sets = maps.Clone(have.sets)
			out = &c
		}
		out.sets[prev] = read
	}
	return out, nil
}

// addSecondChances adds to tx, for every slot whose backend chain changes from have to want, an
// element of the service's prev map holding the chain it had, when that chain stays and the map
// holds no element of that slot yet (readSecondChances): a slot remembers the backend it had
// before its first change within flow_timeout. An element that expires between the read and
// the transaction costs its slot's second chance, never the transaction.
func addSecondChances(tx txWriter, have, want *state) {
	for _, k := range sortedKeys(want.sets) {
		prev := want.sets[objKey{k.family, prevOf(k.name)}]
		if !isServiceObject(k.name, slotsMap) || have.sets[k] == nil || prev == nil {
			continue
		}
		was := valuesByKey(have.sets[k])
		var held map[string][]string
		if h := have.sets[objKey{k.family, prevOf(k.name)}]; h != nil {
			held = valuesByKey(h)
		}
		for _, id := range sortedIDs(want.sets[k].elems) {
			e := want.sets[k].elems[id]
			old, ok := was[strings.Join(e.Key, " . ")]
			if !ok || slices.Equal(old, e.Value) || len(old) != 1 {
				continue
			}
			if _, ok := held[strings.Join(e.Key, " . ")]; ok {
				continue
			}
			if !targetStays(want, k, old[0]) {
				continue
			}
			tx.Add(&knftables.Element{Family: k.family, Table: TableName, Map: prevOf(k.name), Key: e.Key, Value: old})
		}
	}
}

// flushSecondChances adds to tx a flush of the prev map of every service one of whose backend
// chains goes away, before the chain is deleted (an element would hold it). The prev maps are
// indexed by service once: looking through every set for each chain took minutes at 10,000
// services going away.
func flushSecondChances(tx txWriter, have, want *state) {
	type owner struct {
		family  knftables.Family
		service string
	}
	prevs := map[owner][]objKey{}
	for _, p := range sortedKeys(have.sets) {
		if isServiceObject(p.name, prevMap) && want.sets[p] != nil {
			o := owner{p.family, serviceOf(p.name)}
			prevs[o] = append(prevs[o], p)
		}
	}
	flushed := map[objKey]bool{}
	for _, k := range sortedKeys(have.chains) {
		if want.chains[k] != nil || !isServiceObject(k.name, backendChains) {
			continue
		}
		for _, p := range prevs[owner{k.family, serviceOf(k.name)}] {
			if !flushed[p] {
				tx.Flush(have.sets[p].obj)
				flushed[p] = true
			}
		}
	}
}

// valuesByKeyString is valuesByKey with the values joined, to compare.
func valuesByKeyString(d *setDef) map[string]string {
	out := make(map[string]string, len(d.elems))
	for k, v := range valuesByKey(d) {
		out[k] = strings.Join(v, " . ")
	}
	return out
}

// valuesByKey indexes a map's elements' values by key.
func valuesByKey(d *setDef) map[string][]string {
	out := make(map[string][]string, len(d.elems))
	for _, e := range d.elems {
		out[strings.Join(e.Key, " . ")] = e.Value
	}
	return out
}

// forgetSecondChances deletes the prev map elements that send a service's mid-flow segments to
// backend b, whose flows are being reset: a reset flow must break, not come back by second
// chance. Each is added before it is deleted, as deleteFlowElements does, so that one expired
// since the listing fails nothing.
func (d *Datapath) forgetSecondChances(ctx context.Context, s *plan.Service, b plan.Backend) error {
	i := slices.IndexFunc(s.Backends, func(x plan.Backend) bool { return x.ID() == b.ID() })
	if !givesSecondChance(s) || i < 0 {
		return nil
	}
	f, value := knftables.InetFamily, gotoVerdict(backendChain(s.Name, string(s.Protocol), b.ID(), ""))
	if s.Mode == config.ModeDSR {
		f, value = knftables.NetDevFamily, strconv.FormatUint(uint64(backendMarks(s.Backends)[i]), 10)
	}
	prev := namesOf(s).prev
	elems, err := d.host.elements(f, prev)
	if err != nil || len(elems) == 0 {
		return err
	}
	tx := d.nft.NewTransaction()
	n := 0
	for _, e := range elems {
		if strings.Join(e.Value, "") != value {
			continue
		}
		add := &knftables.Element{Family: f, Table: TableName, Map: prev, Key: e.Key, Value: e.Value}
		del := *add
		del.Value = nil
		tx.Add(add)
		tx.Delete(&del)
		n++
	}
	if n == 0 {
		return nil
	}
	return d.nft.Run(ctx, tx)
}
