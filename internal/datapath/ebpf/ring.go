package ebpf

import (
	"cmp"
	"fmt"
	"slices"
)

// ringSpace allocates the services' Maglev tables in the one maglev array, first fit. A table
// whose size does not change keeps its range; one that changes size gets a new range while the
// old one still serves, so that a service switches tables in one vips write.
type ringSpace struct {
	size  uint32
	spans []span // in use, by offset
}

// span is a range of slots [offset, offset+size).
type span struct{ offset, size uint32 }

func (s span) end() uint32 { return s.offset + s.size }

func newRingSpace(size uint32) *ringSpace { return &ringSpace{size: size} }

// alloc finds the first free range of n slots.
func (r *ringSpace) alloc(n uint32) (uint32, error) {
	at := uint32(0)
	for i, s := range r.spans {
		if s.offset-at >= n {
			r.spans = slices.Insert(r.spans, i, span{at, n})
			return at, nil
		}
		at = s.end()
	}
	if r.size-at < n {
		return 0, fmt.Errorf("no free range of %d slots in maglev (%d slots, %d in use): the tables of all services exceed its size", n, r.size, r.used())
	}
	r.spans = append(r.spans, span{at, n})
	return at, nil
}

// reserve takes a given range (one found in the maps); it fails when the range overlaps another
// or lies outside the array.
func (r *ringSpace) reserve(offset, n uint32) error {
	s := span{offset, n}
	if s.end() > r.size || s.end() < offset {
		return fmt.Errorf("slots %d-%d are outside maglev (%d slots)", offset, s.end(), r.size)
	}
	i, _ := slices.BinarySearchFunc(r.spans, offset, func(x span, o uint32) int { return cmp.Compare(x.offset, o) })
	if (i > 0 && r.spans[i-1].end() > offset) || (i < len(r.spans) && r.spans[i].offset < s.end()) {
		return fmt.Errorf("slots %d-%d overlap another service's", offset, s.end())
	}
	r.spans = slices.Insert(r.spans, i, s)
	return nil
}

// free releases the range starting at offset.
func (r *ringSpace) free(offset uint32) {
	r.spans = slices.DeleteFunc(r.spans, func(s span) bool { return s.offset == offset })
}

// used counts the slots in use.
func (r *ringSpace) used() uint32 {
	var n uint32
	for _, s := range r.spans {
		n += s.size
	}
	return n
}

// end is the slot after the last one in use.
func (r *ringSpace) end() uint32 {
	if len(r.spans) == 0 {
		return 0
	}
	return r.spans[len(r.spans)-1].end()
}
