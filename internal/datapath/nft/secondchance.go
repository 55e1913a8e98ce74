package nft

import (
	"fmt"
	"slices"
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

// givesSecondChance tells whether a service gets a prev map: nat and fullnat TCP services whose
// table hashes the flow (maglev, hash, sh) without persistence (whose slots hold marks).
func givesSecondChance(s *plan.Service) bool {
	switch {
	case s.Mode == config.ModeDSR, s.Protocol != config.ProtocolTCP, s.Persistence > 0, len(s.Slots) == 0:
		return false
	case s.Scheduler == config.SchedulerRR, s.Scheduler == config.SchedulerWRR, s.Scheduler == config.SchedulerRandom:
		return false
	}
	return true
}

// renderSecondChance adds a service's prev map and returns the rule that consults it, for the
// segments that are neither a SYN nor a reset.
func renderSecondChance(st *state, s *plan.Service, n serviceNames) string {
	st.addSet(knftables.InetFamily, &knftables.Map{
		Name: n.prev, TypeOf: "numgen inc mod 2 : verdict", Flags: []knftables.SetFlag{knftables.TimeoutFlag},
		Timeout: &s.FlowTimeout, Size: ptr(uint64(len(s.Slots))),
	})
	return fmt.Sprintf("meta l4proto tcp tcp flags & (syn | rst) == 0 %s vmap @%s", selector(s), n.prev)
}

// prevOf is the prev map of the service whose slots map is named slots.
func prevOf(slots string) string {
	o, _ := parseServiceObject(slots)
	o.kind = prevMap
	return o.String()
}

// addSecondChances adds to tx, for every slot whose backend chain changes from have to want, an
// element of the service's prev map holding the chain it had, when that chain stays. The map is
// flushed first: nft 1.0.6 cannot replace an element, and adding one whose key an earlier change
// left there fails the transaction, so a change's record replaces the one before it.
func addSecondChances(tx *knftables.Transaction, have, want *state) {
	for _, k := range sortedKeys(want.sets) {
		prev := want.sets[objKey{k.family, prevOf(k.name)}]
		if !isServiceObject(k.name, slotsMap) || have.sets[k] == nil || prev == nil {
			continue
		}
		was := valuesByKey(have.sets[k])
		flushed := false
		for _, id := range sortedIDs(want.sets[k].elems) {
			e := want.sets[k].elems[id]
			old, ok := was[strings.Join(e.Key, " . ")]
			if !ok || slices.Equal(old, e.Value) || len(old) != 1 {
				continue
			}
			if chain, ok := parseGoto(old[0]); !ok || want.chains[objKey{k.family, chain}] == nil {
				continue
			}
			if !flushed {
				tx.Flush(prev.obj)
				flushed = true
			}
			tx.Add(&knftables.Element{Family: k.family, Table: TableName, Map: prevOf(k.name), Key: e.Key, Value: old})
		}
	}
}

// flushSecondChances adds to tx a flush of the prev map of every service one of whose backend
// chains goes away, before the chain is deleted (an element would hold it).
func flushSecondChances(tx *knftables.Transaction, have, want *state) {
	flushed := map[objKey]bool{}
	for _, k := range sortedKeys(have.chains) {
		if want.chains[k] != nil || !isServiceObject(k.name, backendChains) {
			continue
		}
		for _, p := range sortedKeys(have.sets) {
			if p.family == k.family && isServiceObject(p.name, prevMap) && serviceOf(p.name) == serviceOf(k.name) &&
				want.sets[p] != nil && !flushed[p] {
				tx.Flush(have.sets[p].obj)
				flushed[p] = true
			}
		}
	}
}

// valuesByKey indexes a map's elements' values by key.
func valuesByKey(d *setDef) map[string][]string {
	out := make(map[string][]string, len(d.elems))
	for _, e := range d.elems {
		out[strings.Join(e.Key, " . ")] = e.Value
	}
	return out
}
