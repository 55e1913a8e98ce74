// Package maglev builds Maglev consistent-hashing lookup tables (Eisenbud et al., NSDI'16) with weights.
//
// A table of prime size M maps every slot to one backend. Each backend has a
// preference list of slots, the permutation (offset + j*skip) mod M, where
// offset and skip are derived from the backend's ID with fixed hashes, so every
// node that builds a table from the same set of backends gets the same table.
// Backends take turns claiming their next free preferred slot until the table is
// full (section 3.4 of the paper). Weights are honoured with a credit scheme:
// every turn a backend earns its weight in credit and claims a slot only once
// its credit reaches the largest weight in the set, so it claims slots at a rate
// proportional to its weight.
//
// Like the paper's algorithm, the table favours balance over minimal
// disruption: removing a backend reassigns all of its slots and, because the
// remaining backends then fill in a different order, also a small fraction of
// the other backends' slots.
package maglev

import (
	"cmp"
	"fmt"
	"math/big"
	"slices"
)

// DefaultMinSize is the smallest table size used by DefaultSize.
const DefaultMinSize = 1021

// MaxSize bounds a table: Build accepts sizes up to the largest prime not above it (1048573).
const MaxSize = 1 << 20

// maxPrime is the largest prime not above MaxSize.
const maxPrime = 1048573

// FNV-1a 64 parameters, and the salts hashed before an ID so that its offset
// and skip come from two independent hashes (ASCII "maglev-o" and "maglev-s").
const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
	offsetSalt  = 0x6d61676c65762d6f
	skipSalt    = 0x6d61676c65762d73
)

// DefaultSize returns the table size for n backends: the smallest prime >= DefaultMinSize x 2^k
// for the smallest k with DefaultMinSize x 2^k > 100 x n, capped at the largest prime not above
// MaxSize (1021 up to 10 backends, 2053 up to 20, 4091 up to 40, ...).
//
// M > 100 x backends is the paper's rule of thumb, which keeps every backend's share within
// about 1% of its ideal share. M grows by doublings, not with every backend, because a table of
// another size sends almost every flow's hash to another slot: minimal disruption only holds
// between tables of one size, so adding the 11th backend re-spreads new flows, the 12th does not.
func DefaultSize(n int) int { return sizeByDoublings(DefaultMinSize, 100, n) }

// CompactMinSize is the smallest table size used by CompactSize.
const CompactMinSize = 61

// CompactSize returns a smaller table size for n backends, for datapaths that pay per slot
// (nftables holds a slot as a map element of about 1 KB while nft loads it): the smallest prime
// >= CompactMinSize x 2^k for the smallest k with CompactMinSize x 2^k > 20 x n (61 up to 3
// backends, 127 up to 6, 251 up to 12, 491 up to 24, ...). Equal weights then keep every
// backend's share within 5% of its ideal share, and M still grows by doublings only.
func CompactSize(n int) int { return sizeByDoublings(CompactMinSize, 20, n) }

// sizeByDoublings is the smallest prime >= base x 2^k for the smallest k with base x 2^k >
// perBackend x n, capped at the largest prime not above MaxSize.
func sizeByDoublings(base, perBackend, n int) int {
	if n > (maxPrime-1)/perBackend {
		return maxPrime
	}
	m := base
	for m <= perBackend*n {
		m *= 2
	}
	return min(NextPrime(m), maxPrime)
}

func IsPrime(n int) bool {
	switch {
	case n < 2:
		return false
	case n < 4:
		return true
	case n%2 == 0 || n%3 == 0:
		return false
	case n < 1<<24:
		// Trial division is exact and cheap for table-sized numbers.
		for d := 5; d*d <= n; d += 6 {
			if n%d == 0 || n%(d+2) == 0 {
				return false
			}
		}
		return true
	default:
		// Baillie-PSW, which is exact below 2^64.
		return big.NewInt(int64(n)).ProbablyPrime(0)
	}
}

// NextPrime returns the smallest prime >= n; it panics if that prime does not fit in an int.
func NextPrime(n int) int {
	if n <= 2 {
		return 2
	}
	// p > 0 stops the search when p+2 overflows.
	for p := n | 1; p > 0; p += 2 {
		if IsPrime(p) {
			return p
		}
	}
	panic(fmt.Sprintf("maglev: no prime >= %d fits in an int", n))
}

// Backend is one table member: ID is a stable identity (e.g. "10.0.0.1:80") from which its permutation is derived; Weight 0 means it gets no slot.
type Backend struct {
	ID     string
	Weight uint32
}

// member is the per-build state of one backend of weight > 0.
type member struct {
	index  int    // index into the caller's slice, stored in the table
	weight uint64 // backend weight
	credit uint64 // accumulated credit; a slot is claimed once it reaches maxWeight
	pos    int    // current position in the permutation, (offset + j*skip) mod m
	skip   int    // permutation step, in [1, m-1]
}

// Build returns the lookup table of size m: table[slot] = index into backends.
//
// m must be a prime not above MaxSize and at least the number of backends with
// weight > 0, and IDs must be unique. The table depends only on the set of
// (ID, Weight) pairs, not on their order in backends, apart from the indices it
// holds. With no backend of weight > 0 every entry is -1, meaning "no backend". After Remember,
// a table remembered for the same inputs (Key) is taken instead of built, and every Build of the
// same inputs returns the same table: it is read-only.
func Build(backends []Backend, m int) ([]int, error) {
	if !rememberOn() {
		return build(backends, m)
	}
	key := Key(backends, m)
	if table := remembered(key, m, len(backends)); table != nil {
		return table, nil
	}
	table, err := build(backends, m)
	if err == nil {
		remember(key, table)
	}
	return table, err
}

// build is Build, without Remember's tables.
func build(backends []Backend, m int) ([]int, error) {
	if m > MaxSize {
		return nil, fmt.Errorf("maglev: table size %d exceeds MaxSize (%d)", m, MaxSize)
	}
	if !IsPrime(m) {
		return nil, fmt.Errorf("maglev: table size %d is not prime", m)
	}

	// Fill in ID order so that the table does not depend on input order.
	order := make([]int, len(backends))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(backends[a].ID, backends[b].ID) })
	for i := 1; i < len(order); i++ {
		if id := backends[order[i]].ID; id == backends[order[i-1]].ID {
			return nil, fmt.Errorf("maglev: duplicate backend ID %q", id)
		}
	}

	members := make([]member, 0, len(backends))
	var maxWeight uint64
	for _, i := range order {
		w := uint64(backends[i].Weight)
		if w == 0 {
			continue
		}
		offset, skip := permutation(backends[i].ID, m)
		members = append(members, member{index: i, weight: w, pos: offset, skip: skip})
		maxWeight = max(maxWeight, w)
	}
	if len(members) > m {
		return nil, fmt.Errorf("maglev: table size %d is smaller than the %d backends with weight > 0", m, len(members))
	}

	table := make([]int, m)
	for i := range table {
		table[i] = -1
	}
	if len(members) == 0 {
		return table, nil
	}

	// Start every credit at maxWeight-weight so that each backend claims a slot
	// in the first round: even a tiny weight owns at least one slot.
	for i := range members {
		members[i].credit = maxWeight - members[i].weight
	}
	for filled := 0; ; {
		for i := range members {
			b := &members[i]
			b.credit += b.weight
			if b.credit < maxWeight {
				continue
			}
			b.credit -= maxWeight
			// The permutation visits every slot, and a free one exists while
			// filled < m, so this loop terminates.
			for table[b.pos] >= 0 {
				b.advance(m)
			}
			table[b.pos] = b.index
			b.advance(m)
			if filled++; filled == m {
				return table, nil
			}
		}
	}
}

// advance moves b to the next slot of its permutation.
func (b *member) advance(m int) {
	b.pos += b.skip
	if b.pos >= m {
		b.pos -= m
	}
}

// permutation returns the offset and skip of id's preference list in a table of prime size m.
func permutation(id string, m int) (offset, skip int) {
	offset = int(hash(offsetSalt, id) % uint64(m))
	skip = int(hash(skipSalt, id)%uint64(m-1)) + 1
	return offset, skip
}

// hash is FNV-1a 64 of salt followed by s, finished with the murmur3 fmix64 mixer.
func hash(salt uint64, s string) uint64 {
	h := uint64(fnvOffset64)
	for range 8 {
		h ^= salt & 0xff
		h *= fnvPrime64
		salt >>= 8
	}
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime64
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}
