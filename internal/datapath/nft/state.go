package nft

import (
	"maps"
	"sort"
	"strings"

	"sigs.k8s.io/knftables"
)

// objKey names one nftables object of Sluice's tables.
type objKey struct {
	family knftables.Family
	name   string
}

// chainDef is a chain with its rules. Chain names carry a hash of everything their rules depend
// on, so two chains of the same name are the same chain.
type chainDef struct {
	chain *knftables.Chain
	rules []string
}

// setDef is a set or map with its elements, indexed by elementID.
type setDef struct {
	obj   knftables.Object // *knftables.Set or *knftables.Map
	elems map[string]*knftables.Element
}

// state is the content of Sluice's nftables tables, desired (rendered) or current (read back).
type state struct {
	tables   map[knftables.Family]bool
	chains   map[objKey]*chainDef
	sets     map[objKey]*setDef
	counters map[objKey]*knftables.Counter
}

func newState() *state {
	return &state{
		tables:   map[knftables.Family]bool{},
		chains:   map[objKey]*chainDef{},
		sets:     map[objKey]*setDef{},
		counters: map[objKey]*knftables.Counter{},
	}
}

// addChain adds a chain with its rules; a base chain (on a hook) gets a hash of its rules at the
// end of its name, so that rules that change make another chain (see baseChain).
func (s *state) addChain(c *knftables.Chain, rules ...string) {
	c.Table = TableName
	if c.Hook != nil {
		c.Name += "-" + hash8(rules...)
	}
	s.chains[objKey{c.Family, c.Name}] = &chainDef{chain: c, rules: rules}
}

func (s *state) addSet(family knftables.Family, obj knftables.Object) *setDef {
	d := &setDef{obj: obj, elems: map[string]*knftables.Element{}}
	switch o := obj.(type) {
	case *knftables.Set:
		o.Family, o.Table = family, TableName
	case *knftables.Map:
		o.Family, o.Table = family, TableName
	}
	s.sets[objKey{family, setName(obj)}] = d
	return d
}

func setName(obj knftables.Object) string {
	switch o := obj.(type) {
	case *knftables.Set:
		return o.Name
	case *knftables.Map:
		return o.Name
	}
	return ""
}

// shared returns the set or map obj of a base's, to add a service's elements to; a service's
// state holds it without its other elements until composed with the base.
func (s *state) shared(family knftables.Family, obj knftables.Object) *setDef {
	if d := s.sets[objKey{family, setName(obj)}]; d != nil {
		return d
	}
	return s.addSet(family, obj)
}

func (d *setDef) add(e *knftables.Element) {
	switch o := d.obj.(type) {
	case *knftables.Set:
		e.Family, e.Table, e.Set = o.Family, o.Table, o.Name
	case *knftables.Map:
		e.Family, e.Table, e.Map = o.Family, o.Table, o.Name
	}
	d.elems[elementID(e)] = e
}

// clone copies s: its sets, with their elements; the chains and counters, which nothing changes
// once made, are shared.
func (s *state) clone() *state {
	c := newState()
	c.include(s)
	for k, d := range s.sets {
		c.sets[k] = &setDef{obj: d.obj, elems: maps.Clone(d.elems)}
	}
	return c
}

// include adds src's objects to s: the elements of a set both hold are added to s's, the other
// objects are shared with src. A set must only be in both when s owns it (a base's set).
func (s *state) include(src *state) {
	maps.Copy(s.tables, src.tables)
	maps.Copy(s.chains, src.chains)
	maps.Copy(s.counters, src.counters)
	for k, d := range src.sets {
		if mine := s.sets[k]; mine != nil {
			maps.Copy(mine.elems, d.elems)
		} else {
			s.sets[k] = d
		}
	}
}

func (s *state) addCounter(family knftables.Family, name string) {
	s.counters[objKey{family, name}] = &knftables.Counter{Family: family, Table: TableName, Name: name}
}

// elementID identifies an element with its value. Elements of interval sets carry their key as
// comment, because nft's JSON listing of a range inside a concatenation cannot be read back.
func elementID(e *knftables.Element) string {
	id := strings.Join(e.Key, " . ")
	if e.Comment != nil {
		id = *e.Comment
	}
	return id + " : " + strings.Join(e.Value, " . ")
}

func sortedKeys[V any](m map[objKey]V) []objKey {
	keys := make([]objKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].family != keys[j].family {
			return keys[i].family < keys[j].family
		}
		return keys[i].name < keys[j].name
	})
	return keys
}

func sortedIDs(m map[string]*knftables.Element) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
