/* Sluice eBPF datapath: the flow hash (Bob Jenkins' lookup3 over the 10 words of a flow_key).
 * It has a fixed seed so that every balancer of an ECMP group picks the same backend for a flow. */
#ifndef SLUICE_HASH_H
#define SLUICE_HASH_H

#include <linux/types.h>
#include <bpf/bpf_helpers.h>
#include "structs.h"

#define HASH_SEED 0x511ceu /* any fixed value; changing it remaps every flow */

#define rol32(x, k) (((x) << (k)) | ((x) >> (32 - (k))))

/* The lookup3 macros keep the reference's layout, three steps a line. */
/* clang-format off */
/* lookup3's mix of three words. */
#define hash_mix(a, b, c)                          \
	do {                                       \
		a -= c; a ^= rol32(c, 4);  c += b; \
		b -= a; b ^= rol32(a, 6);  a += c; \
		c -= b; c ^= rol32(b, 8);  b += a; \
		a -= c; a ^= rol32(c, 16); c += b; \
		b -= a; b ^= rol32(a, 19); a += c; \
		c -= b; c ^= rol32(b, 4);  b += a; \
	} while (0)

/* lookup3's final avalanche of three words. */
#define hash_final(a, b, c)                  \
	do {                                 \
		c ^= b; c -= rol32(b, 14);   \
		a ^= c; a -= rol32(c, 11);   \
		b ^= a; b -= rol32(a, 25);   \
		c ^= b; c -= rol32(b, 16);   \
		a ^= c; a -= rol32(c, 4);    \
		b ^= a; b -= rol32(a, 14);   \
		c ^= b; c -= rol32(b, 24);   \
	} while (0)
/* clang-format on */

/* Hashes a flow's 5-tuple; salt varies the result (0 for backend selection). A global function,
 * as is source_hash: the verifier checks it once, on its own, rather than its whole body again in
 * every state of every caller (fullnat_claim alone hashes sixteen times); k is never NULL, but a
 * global function's pointer argument may be as far as the verifier knows. */
__noinline __u32 flow_hash(const struct flow_key *k, __u32 salt)
{
	const __u32 *w = (const __u32 *)k;
	__u32        a, b, c;

	if (!k)
		return 0;

	_Static_assert(sizeof(*k) == 40, "flow_key is hashed as 10 words");
	a = b = c = 0xdeadbeef + sizeof(*k) + HASH_SEED + salt;
#pragma unroll
	for (int i = 0; i < 9; i += 3) {
		a += w[i];
		b += w[i + 1];
		c += w[i + 2];
		hash_mix(a, b, c);
	}
	a += w[9];
	hash_final(a, b, c);
	return c;
}

/* Hashes a flow's source address, and its source port when with_port (the sh scheduler). */
__noinline __u32 source_hash(const struct flow_key *k, int with_port)
{
	const __u32 *w = (const __u32 *)k->src;
	__u32        a, b, c;

	if (!k)
		return 0;

	a = b = c = 0xdeadbeef + 20 + HASH_SEED;
	a += w[0];
	b += w[1];
	c += w[2];
	hash_mix(a, b, c);
	a += w[3];
	b += with_port ? k->sport : 0;
	c += k->family;
	hash_final(a, b, c);
	return c;
}

#endif
