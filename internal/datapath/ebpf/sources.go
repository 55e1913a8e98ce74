package ebpf

import (
	"errors"
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/sluicelb/sluice/internal/plan"
)

// sourceLists are a service's access lists as programmed in source_allow and source_deny.
type sourceLists struct {
	allow, deny []netip.Prefix
}

// sourceKey is the LPM trie key of prefix p of service id: the id's 32 bits, then the prefix's.
func sourceKey(id uint32, p netip.Prefix) sluiceSourceKey {
	k := sluiceSourceKey{Prefixlen: 32 + uint32(p.Bits()), ServiceId: id}
	k.Addr, _ = wireAddr(p.Addr())
	return k
}

// prefixOf is the prefix an LPM trie key of a service of family holds.
func (k sluiceSourceKey) prefixOf(family uint8) netip.Prefix {
	p, _ := addrFromWire(k.Addr, family).Prefix(int(k.Prefixlen) - 32)
	return p
}

// sources writes a service's access lists: the prefixes it gains before want's settings turn a
// list on, the ones it loses after they turn it off, so the program never sees a list emptier
// than both the old and the new one.
func (s *syncer) sources(cur *serviceState, ps *plan.Service, want sluiceServiceSettings) error {
	add := func(m *ebpf.Map, have, next []netip.Prefix) error {
		for _, p := range missing(next, have) {
			if err := s.w.put(m, sourceKey(cur.id, p), uint8(1)); err != nil {
				return err
			}
		}
		return nil
	}
	if err := errors.Join(add(s.m.SourceAllow, cur.sources.allow, ps.SourceAllow), add(s.m.SourceDeny, cur.sources.deny, ps.SourceDeny)); err != nil {
		return err
	}
	if want != cur.opts {
		if err := s.w.put(s.m.ServiceOpts, cur.id, want); err != nil {
			return err
		}
		cur.opts = want
	}
	if err := s.dropSources(cur, sourceLists{missing(cur.sources.allow, ps.SourceAllow), missing(cur.sources.deny, ps.SourceDeny)}); err != nil {
		return err
	}
	cur.sources = sourceLists{ps.SourceAllow, ps.SourceDeny}
	return nil
}

// dropSources deletes prefixes of a service's lists.
func (s *syncer) dropSources(cur *serviceState, gone sourceLists) error {
	for _, l := range []struct {
		m        *ebpf.Map
		prefixes []netip.Prefix
	}{{s.m.SourceAllow, gone.allow}, {s.m.SourceDeny, gone.deny}} {
		for _, p := range l.prefixes {
			if err := s.w.delete(l.m, sourceKey(cur.id, p)); err != nil {
				return err
			}
		}
	}
	return nil
}

// missing lists the prefixes of a that b lacks.
func missing(a, b []netip.Prefix) []netip.Prefix {
	in := make(map[netip.Prefix]bool, len(b))
	for _, p := range b {
		in[p] = true
	}
	var out []netip.Prefix
	for _, p := range a {
		if !in[p] {
			out = append(out, p)
		}
	}
	return out
}

// readSources reads the access lists back into their services (entries of no service are
// strays: the next sync of a service with that id replaces them, a free id never reads them).
func readSources(m *kernelMaps, st *state) error {
	for _, l := range []struct {
		m    *ebpf.Map
		list func(*sourceLists) *[]netip.Prefix
	}{
		{m.SourceAllow, func(s *sourceLists) *[]netip.Prefix { return &s.allow }},
		{m.SourceDeny, func(s *sourceLists) *[]netip.Prefix { return &s.deny }},
	} {
		if l.m == nil {
			continue
		}
		var k sluiceSourceKey
		var v uint8
		it := l.m.Iterate()
		for it.Next(&k, &v) {
			if s := st.byID[k.ServiceId]; s != nil {
				list := l.list(&s.sources)
				*list = append(*list, k.prefixOf(s.rec.Family))
			}
		}
		if err := it.Err(); err != nil {
			return err
		}
	}
	return nil
}
