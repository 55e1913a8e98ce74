package nft

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	"sigs.k8s.io/knftables"
)

// maxBatchOperations bounds the operations of one nft transaction. nft 1.0.6 holds about 1.6 KB
// per operation while it parses and sends a transaction (10.4 million operations took it to
// 17 GB), so a batch of 40,000 stays near 64 MB whatever the size of the config.
const maxBatchOperations = 40000

// batch is one transaction of a change: the states it reconciles, and the services it changes
// (none for the first and last batches of a split change, which hold only shared objects).
type batch struct {
	have, want *state
	services   []string
}

// batches splits the change from have to want into batches to reconcile one after another, each in
// its own transaction of about maxOps operations at most. A service's objects and its elements of
// the shared sets always travel together, so every transaction takes each service it touches from
// its old state to its new one at once; services whose shared elements share a key (a VIP handed
// from one service to another) travel together too. The first batch creates the shared objects
// both states need, and the last deletes those want no longer holds. A change that fits in one
// transaction is one batch: have to want.
func batches(have, want *state, maxOps int) []batch {
	units := changeUnits(have, want)
	total := 0
	var all []string
	for _, u := range units {
		total += u.ops
		all = append(all, u.services...)
	}
	if total <= maxOps {
		slices.Sort(all)
		return []batch{{have, want, all}}
	}
	haveBase, wantBase := have.base(), want.base()
	bridge := haveBase.union(wantBase)
	out := []batch{{have: haveBase, want: bridge}}
	var group []string
	ops := 0
	flush := func() {
		if len(group) > 0 {
			named := map[string]bool{}
			for _, name := range group {
				named[name] = true
			}
			out = append(out, batch{have.only(named, bridge), want.only(named, bridge), group})
		}
		group, ops = nil, 0
	}
	for _, u := range units {
		if ops > 0 && ops+u.ops > maxOps {
			flush()
		}
		group = append(group, u.services...)
		ops += u.ops
	}
	flush()
	return append(out, batch{have: bridge, want: wantBase})
}

// changeUnit is services that must change in one transaction, and an upper bound of the
// operations that takes.
type changeUnit struct {
	services []string
	ops      int
	removal  bool // every service of the unit is gone from want
}

// changeUnits groups the services of have and want into units (those sharing a key of a shared
// set together), removals first so that a key they free is free before a later batch takes it.
func changeUnits(have, want *state) []changeUnit {
	parent := map[string]string{}
	var find func(string) string
	find = func(s string) string {
		p, ok := parent[s]
		if !ok {
			parent[s] = s
			return s
		}
		if p == s {
			return s
		}
		root := find(p)
		parent[s] = root
		return root
	}
	ops := map[string]int{}
	inWant := map[string]bool{}
	keyOwner := map[string]string{}
	for _, pair := range [][2]*state{{have, want}, {want, have}} {
		st := pair[0]
		st.eachOwned(pair[1], func(owner string, n int) {
			find(owner)
			ops[owner] += n
		}, func(owner string) {
			if st == want {
				inWant[owner] = true
			}
		}, func(owner, key string) {
			if other, ok := keyOwner[key]; ok {
				parent[find(owner)] = find(other)
			} else {
				keyOwner[key] = owner
			}
		})
	}
	byRoot := map[string]*changeUnit{}
	for name := range ops {
		root := find(name)
		u := byRoot[root]
		if u == nil {
			u = &changeUnit{removal: true}
			byRoot[root] = u
		}
		u.services = append(u.services, name)
		u.ops += ops[name]
		u.removal = u.removal && !inWant[name]
	}
	units := make([]changeUnit, 0, len(byRoot))
	for _, u := range byRoot {
		slices.Sort(u.services)
		units = append(units, *u)
	}
	slices.SortFunc(units, func(a, b changeUnit) int {
		if a.removal != b.removal {
			if a.removal {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.services[0], b.services[0])
	})
	return units
}

// eachOwned calls change for every service owning objects or elements of s that other lacks,
// with how many operations they may take (an upper bound: objects, rules and elements), owns for
// every service owning anything of s, and key for each of the elements of the shared sets that
// other lacks, by set and key.
func (s *state) eachOwned(other *state, change func(service string, ops int), owns func(service string), key func(service, key string)) {
	for k, c := range s.chains {
		if owner := serviceOf(k.name); owner != "" {
			owns(owner)
			if other.chains[k] == nil {
				change(owner, 1+len(c.rules))
			}
		}
	}
	for k := range s.counters {
		if owner := serviceOf(k.name); owner != "" {
			owns(owner)
			if other.counters[k] == nil {
				change(owner, 1)
			}
		}
	}
	for k, d := range s.sets {
		theirs := other.sets[k]
		if owner := serviceOf(k.name); owner != "" {
			owns(owner)
			if n := d.missingFrom(theirs); n > 0 {
				change(owner, n)
			}
			continue
		}
		for id, e := range d.elems {
			owner := elementOwner(e)
			if owner == "" {
				continue
			}
			owns(owner)
			if theirs == nil || theirs.elems[id] == nil {
				change(owner, 1)
				key(owner, string(k.family)+" "+k.name+" "+strings.Join(deletable(e).Key, " . "))
			}
		}
	}
}

// missingFrom counts what of d other lacks: d whole (the set and its elements) when other is
// nil, else d's elements other does not hold.
func (d *setDef) missingFrom(other *setDef) int {
	if other == nil {
		return 1 + len(d.elems)
	}
	n := 0
	for id := range d.elems {
		if other.elems[id] == nil {
			n++
		}
	}
	return n
}

// base is what of s belongs to no service: tables, base chains and the shared sets, with only
// their elements of no service (which nothing renders: they are someone else's, to delete).
func (s *state) base() *state {
	return s.only(nil, s)
}

// only is the shared objects of shared (as base returns them) with the part of s that belongs to
// the services named: their objects, and their elements of the shared sets.
func (s *state) only(services map[string]bool, shared *state) *state {
	out := newState()
	maps.Copy(out.tables, shared.tables)
	for k, c := range shared.chains {
		if serviceOf(k.name) == "" {
			out.chains[k] = c
		}
	}
	for k, c := range shared.counters {
		if serviceOf(k.name) == "" {
			out.counters[k] = c
		}
	}
	for k, d := range shared.sets {
		if serviceOf(k.name) == "" {
			out.sets[k] = d.filter(func(e *knftables.Element) bool { return elementOwner(e) == "" })
		}
	}
	for k, c := range s.chains {
		if services[serviceOf(k.name)] {
			out.chains[k] = c
		}
	}
	for k, c := range s.counters {
		if services[serviceOf(k.name)] {
			out.counters[k] = c
		}
	}
	for k, d := range s.sets {
		if owner := serviceOf(k.name); owner != "" {
			if services[owner] {
				out.sets[k] = d
			}
			continue
		}
		mine := d.filter(func(e *knftables.Element) bool { return services[elementOwner(e)] })
		if have := out.sets[k]; have != nil {
			maps.Copy(mine.elems, have.elems)
		}
		out.sets[k] = mine
	}
	return out
}

// filter is a copy of d with the elements keep keeps.
func (d *setDef) filter(keep func(*knftables.Element) bool) *setDef {
	out := &setDef{obj: d.obj, elems: map[string]*knftables.Element{}}
	for id, e := range d.elems {
		if keep(e) {
			out.elems[id] = e
		}
	}
	return out
}

// union is a state holding the objects of both (s's where both hold one), and the elements of
// both.
func (s *state) union(other *state) *state {
	out := other.clone()
	out.include(s.clone())
	return out
}

// elementOwner is the service an element of a shared set belongs to: dispatch and full-NAT
// elements name it first in their comment, forwarded ones point to its packet counter.
func elementOwner(e *knftables.Element) string {
	if isShared(e.Map, forwardedKind) && len(e.Value) == 1 {
		return serviceOf(e.Value[0])
	}
	if e.Comment != nil {
		if f := strings.Fields(*e.Comment); len(f) > 0 && (isShared(e.Map, dispatchKind) || isShared(e.Set, fullNATKind) || isShared(e.Map, snatKind)) {
			return f[0]
		}
	}
	return ""
}
