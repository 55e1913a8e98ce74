package nft

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
)

// The slot of a new flow is what the kernel's nft_jhash expression computes for the selector
// `jhash <ip> saddr . <proto> sport . <ip> daddr . <proto> dport mod N seed hashSeed` (see
// selector): jhash (include/linux/jhash.h, Bob Jenkins' lookup3) over the registers the four
// fields were loaded into, scaled to N with reciprocal_scale. Each field fills whole 32-bit
// registers, zero-padded: a port takes 4 bytes, so the key is 16 bytes for IPv4 and 40 for IPv6.

// jhashSeed is hashSeed as a number.
const jhashSeed = 0x51ce

// flowKeySeed and flowKeyModulus make the hashed key of an IPv6 dsr flow (dsrFlowKey): another
// seed than the selector's, and the largest modulus nft takes.
const (
	flowKeySeed    = 0xd5e6
	flowKeyModulus = 1<<32 - 1
)

// dsrFlowHash is the key an IPv6 dsr flow from src to the service's port vport has in its flow
// map: `jhash ip6 saddr . <proto> sport . <proto> dport mod flowKeyModulus seed flowKeySeed`,
// the registers of the address and the two ports, each port padded to 4 bytes.
func dsrFlowHash(src netip.AddrPort, vport uint16) uint32 {
	key := append(src.Addr().AsSlice(), 0, 0, 0, 0, 0, 0, 0, 0)
	binary.BigEndian.PutUint16(key[len(key)-8:], src.Port())
	binary.BigEndian.PutUint16(key[len(key)-4:], vport)
	return reciprocalScale(jhash(key, flowKeySeed), flowKeyModulus)
}

// jhashInitval is the kernel's JHASH_INITVAL.
const jhashInitval = 0xdeadbeef

// flowSlot is the slot, of n, that the nft datapath's jhash selector gives a flow from src to dst.
func flowSlot(src, dst netip.AddrPort, n int) uint32 {
	return reciprocalScale(jhash(flowHashKey(src, dst), jhashSeed), uint32(n))
}

// shSlot is the slot, of n, that the sh selector gives a flow from src: `jhash <ip> saddr mod N`,
// a key of the address alone, or with the source port (withPort) `jhash <ip> saddr . <proto>
// sport mod N`, the port padded to 4 bytes.
func shSlot(src netip.AddrPort, withPort bool, n int) uint32 {
	key := src.Addr().Unmap().AsSlice()
	if withPort {
		key = append(binary.BigEndian.AppendUint16(key, src.Port()), 0, 0)
	}
	return reciprocalScale(jhash(key, jhashSeed), uint32(n))
}

// flowHashKey lays out the registers the selector hashes: src address, src port, dst address,
// dst port, each padded to 4 bytes.
func flowHashKey(src, dst netip.AddrPort) []byte {
	key := make([]byte, 0, 40)
	for _, ap := range []netip.AddrPort{src, dst} {
		key = append(key, ap.Addr().Unmap().AsSlice()...)
		key = binary.BigEndian.AppendUint16(key, ap.Port())
		key = append(key, 0, 0)
	}
	return key
}

// reciprocalScale maps a 32-bit hash onto [0, n) as the kernel's reciprocal_scale does.
func reciprocalScale(h, n uint32) uint32 {
	return uint32(uint64(h) * uint64(n) >> 32)
}

// jhash is the kernel's jhash(key, len(key), initval). It reads whole words in the CPU's byte
// order (__get_unaligned_cpu32) and the tail byte by byte as little-endian, as the kernel does.
func jhash(key []byte, initval uint32) uint32 {
	a := jhashInitval + uint32(len(key)) + initval
	b, c := a, a
	for len(key) > 12 {
		a += binary.NativeEndian.Uint32(key[0:])
		b += binary.NativeEndian.Uint32(key[4:])
		c += binary.NativeEndian.Uint32(key[8:])
		a, b, c = jhashMix(a, b, c)
		key = key[12:]
	}
	if len(key) == 0 {
		return c
	}
	var tail [12]byte
	copy(tail[:], key)
	a += binary.LittleEndian.Uint32(tail[0:])
	b += binary.LittleEndian.Uint32(tail[4:])
	c += binary.LittleEndian.Uint32(tail[8:])
	return jhashFinal(a, b, c)
}

// jhashMix is the kernel's __jhash_mix.
func jhashMix(a, b, c uint32) (uint32, uint32, uint32) {
	a -= c
	a ^= bits.RotateLeft32(c, 4)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 6)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 8)
	b += a
	a -= c
	a ^= bits.RotateLeft32(c, 16)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 19)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 4)
	b += a
	return a, b, c
}

// jhashFinal is the kernel's __jhash_final; it returns c.
func jhashFinal(a, b, c uint32) uint32 {
	c ^= b
	c -= bits.RotateLeft32(b, 14)
	a ^= c
	a -= bits.RotateLeft32(c, 11)
	b ^= a
	b -= bits.RotateLeft32(a, 25)
	c ^= b
	c -= bits.RotateLeft32(b, 16)
	a ^= c
	a -= bits.RotateLeft32(c, 4)
	b ^= a
	b -= bits.RotateLeft32(a, 14)
	c ^= b
	c -= bits.RotateLeft32(b, 24)
	return c
}
