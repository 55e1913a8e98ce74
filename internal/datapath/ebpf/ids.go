package ebpf

import "math/bits"

// idSet hands out service or backend ids, lowest free first. An id is freed only once no flow
// can refer to it any more (see sweep), so handing it out again at once is safe.
type idSet struct {
	words []uint64 // bit i: id i is in use
	limit uint32
	low   uint32 // no id below is free
}

func newIDSet(limit uint32) *idSet {
	return &idSet{words: make([]uint64, (limit+63)/64), limit: limit}
}

// alloc takes the lowest free id; false when all are in use.
func (s *idSet) alloc() (uint32, bool) {
	for w := s.low / 64; w < uint32(len(s.words)); w++ {
		free := ^s.words[w]
		if free == 0 {
			continue
		}
		id := w*64 + uint32(bits.TrailingZeros64(free))
		if id >= s.limit {
			break
		}
		s.mark(id)
		s.low = id + 1
		return id, true
	}
	s.low = s.limit
	return 0, false
}

// mark takes a given id (one found in the maps); false when it is out of range.
func (s *idSet) mark(id uint32) bool {
	if id >= s.limit {
		return false
	}
	s.words[id/64] |= 1 << (id % 64)
	return true
}

// free returns an id.
func (s *idSet) free(id uint32) {
	s.words[id/64] &^= 1 << (id % 64)
	s.low = min(s.low, id)
}

// has tells whether an id is in use.
func (s *idSet) has(id uint32) bool {
	return id < s.limit && s.words[id/64]&(1<<(id%64)) != 0
}
