package nft

import (
	"strings"

	"sigs.k8s.io/knftables"
)

// reconcile adds to tx what turns have into want, touching only what differs, and returns the
// number of operations. Order matters inside the one atomic transaction: objects are created
// before anything refers to them, and references are dropped before their targets are deleted.
func reconcile(tx txWriter, have, want *state) int {
	for f := range want.tables {
		if !have.tables[f] {
			tx.Add(&knftables.Table{Family: f, Name: TableName})
		}
	}
	for _, k := range sortedKeys(want.counters) {
		if have.counters[k] == nil {
			tx.Add(want.counters[k])
		}
	}
	for _, k := range sortedKeys(want.sets) {
		if have.sets[k] == nil {
			tx.Add(want.sets[k].obj)
		}
	}
	var newChains []objKey
	for _, k := range sortedKeys(want.chains) {
		if have.chains[k] == nil {
			tx.Add(want.chains[k].chain)
			newChains = append(newChains, k)
		}
	}
	for _, k := range newChains {
		c := want.chains[k]
		for _, r := range c.rules {
			tx.Add(&knftables.Rule{Family: k.family, Table: TableName, Chain: k.name, Rule: r})
		}
	}
	// Elements: drop stale ones first (a changed value is a delete then an add of the same key).
	// The packet path's sets (and the prev maps, which Apply writes as slots change) are not
	// compared: what they hold is not rendered.
	for _, k := range sortedKeys(want.sets) {
		w, h := want.sets[k], have.sets[k]
		if h == nil || isPacketPathSet(k.name) {
			continue
		}
		for _, id := range sortedIDs(h.elems) {
			if w.elems[id] == nil {
				tx.Delete(deletable(h.elems[id]))
			}
		}
	}
	flushSecondChances(tx, have, want)
	for _, k := range sortedKeys(want.sets) {
		w, h := want.sets[k], have.sets[k]
		if isPacketPathSet(k.name) {
			continue
		}
		for _, id := range sortedIDs(w.elems) {
			if h == nil || h.elems[id] == nil {
				tx.Add(w.elems[id])
			}
		}
	}
	addSecondChances(tx, have, want)
	// Obsolete objects: empty chains first so nothing refers to what is deleted next.
	for _, k := range sortedKeys(have.chains) {
		if want.chains[k] == nil && want.tables[k.family] {
			tx.Flush(have.chains[k].chain)
		}
	}
	for _, k := range sortedKeys(have.sets) {
		if want.sets[k] == nil && want.tables[k.family] {
			tx.Delete(have.sets[k].obj)
		}
	}
	for _, k := range sortedKeys(have.chains) {
		if want.chains[k] == nil && want.tables[k.family] {
			tx.Delete(have.chains[k].chain)
		}
	}
	for _, k := range sortedKeys(have.counters) {
		if want.counters[k] == nil && want.tables[k.family] {
			tx.Delete(have.counters[k])
		}
	}
	for f := range have.tables {
		if !want.tables[f] {
			tx.Delete(&knftables.Table{Family: f, Name: TableName})
		}
	}
	return tx.NumOperations()
}

// deletable is the element as nft needs it to delete: its key, recovered from the comment where
// the listing could not be read back (ranges in concatenations).
func deletable(e *knftables.Element) *knftables.Element {
	d := *e
	d.Value = nil
	if e.Comment != nil {
		d.Key = keyFromComment(e)
		d.Comment = nil
	}
	return &d
}

// keyFromComment recovers an element's key from its comment. Dispatch, full-NAT and synproxy
// elements carry the service description ("web tcp 10.0.0.1 80 nat maglev"), keyed by
// proto . vip . ports and vip . ports; the others carry their key itself.
func keyFromComment(e *knftables.Element) []string {
	f := strings.Fields(*e.Comment)
	switch {
	case isShared(e.Map, dispatchKind) && len(f) >= 4:
		return f[1:4]
	case (isShared(e.Set, fullNATKind) || isShared(e.Map, snatKind) || isShared(e.Map, synproxyKind)) && len(f) >= 4:
		return f[2:4]
	default:
		return strings.Split(*e.Comment, " . ")
	}
}
