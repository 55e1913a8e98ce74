/* Sluice eBPF datapath: one's-complement checksum arithmetic (RFC 1071, incremental per RFC 1624).
 *
 * Values are raw memory loads (no byte swapping), like the kernel's __wsum: a one's-complement
 * sum is byte-order independent as long as every operand is a raw load of the same parity. */
#ifndef SLUICE_CSUM_H
#define SLUICE_CSUM_H

#include <linux/types.h>
#include <bpf/bpf_helpers.h>

/* a + b with end-around carry. Computed in 64 bits, without a comparison: the compiler makes a
 * branch of (s < a), and every branch doubles the states the verifier walks through a checksum. */
static __always_inline __u32 csum_add(__u32 a, __u32 b)
{
	__u64 s = (__u64)a + b;

	return (__u32)s + (__u32)(s >> 32);
}

/* Folds a 32-bit sum to 16 bits and complements it: the value a checksum field holds. */
static __always_inline __u16 csum_fold(__u32 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

/* The difference made by replacing 32-bit word old with new. */
static __always_inline __u32 csum_diff32(__u32 old, __u32 new)
{
	return csum_add(~old, new);
}

/* The difference made by replacing 16-bit word old with new. */
static __always_inline __u32 csum_diff16(__u16 old, __u16 new)
{
	return csum_add((__u16)~old, new);
}

/* The difference made by replacing n 32-bit words (n <= 8, a constant) old with new. */
static __always_inline __u32 csum_diff_words(const __u32 *old, const __u32 *new, int n)
{
	__u32 d = 0;

#pragma unroll
	for (int i = 0; i < 8; i++)
		if (i < n)
			d = csum_add(d, csum_diff32(old[i], new[i]));
	return d;
}

/* A complete checksum field after a change whose difference is diff. */
static __always_inline __u16 csum_apply(__u16 check, __u32 diff)
{
	return csum_fold(csum_add((__u16)~check, diff));
}

/* A complete UDP checksum after a change: 0 (none, IPv4) stays 0 and a result of 0 is sent as
 * 0xffff (RFC 768). */
static __always_inline __u16 csum_apply_udp(__u16 check, __u32 diff)
{
	if (!check)
		return 0;
	check = csum_apply(check, diff);
	return check ? check : 0xffff;
}

#endif
