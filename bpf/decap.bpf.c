// SPDX-License-Identifier: GPL-2.0
/* Sluice's backend-side decapsulation (`sluice decap`), for mode tunnel's backends on kernels
 * without the ipip/fou modules: a tc ingress program that strips the outer header of IPIP and
 * GUE packets a balancer sent to this host and hands the inner packet to the stack.
 *
 * A packet is decapsulated when its outer destination is one of this host's addresses
 * (decap_local: the prefixes of the local routing table's local routes, so addresses and AnyIP
 * ranges alike; decap_memo remembers the last two found, as a lookup in the trie costs about 60 ns
 * and a backend's tunnel packets come to few addresses) and it is IP in IP: protocol (IPv4) or next header (IPv6) 4 for IPv4 inside, 41
 * for IPv6 inside, whatever the outer family (IPv6 in IPv4, "6in4", and IPv4 in IPv6 too), or UDP
 * to the GUE port (decap_config) holding GUE variant 1 (the IP packet directly, its version
 * nibble telling its family) or variant 0 with no options (a 4-byte header whose proto field is
 * 4 or 41, then the IP packet). Everything else passes untouched: other traffic, tunnel packets
 * to other hosts (transit), outer IP options or fragments. A tunnel packet whose inner packet is
 * truncated, not of the family its outer headers announce or inconsistent with the outer lengths
 * is dropped and counted malformed; one whose inner destination is none of this host's addresses
 * is dropped and counted foreign, so the host never forwards what a tunnel brought.
 *
 * The program only reads the packet with bpf_skb_load_bytes and removes the outer headers with
 * bpf_skb_adjust_room, which sets skb->protocol to the inner family; when that differs from the
 * outer one, bpf_skb_store_bytes rewrites the EtherType to match. It writes nothing directly (no
 * unclone prologue). */
#include <stdbool.h>
#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#ifndef AF_INET
#define AF_INET  2
#define AF_INET6 10
#endif
#ifndef BPF_F_ADJ_ROOM_DECAP_L3_IPV4
#define BPF_F_ADJ_ROOM_DECAP_L3_IPV4 (1ULL << 7) /* kernel 6.3 */
#define BPF_F_ADJ_ROOM_DECAP_L3_IPV6 (1ULL << 8)
#endif

#define MAX_LOCAL  4096   /* this host's local prefixes */
#define IP_MF      0x2000 /* more fragments */
#define IP_OFFSET  0x1fff /* fragment offset mask */
#define GUE_V0_LEN 4      /* a GUE variant 0 header without options */

/* One of this host's local prefixes (decap_local's key, an LPM trie key: prefixlen counts the
 * family word's 32 bits and the address's). */
struct local_key {
	__u32 prefixlen;
	__u8  family;
	__u8  pad[3];
	__u8  addr[16]; /* IPv4 in the first 4 bytes, the rest zero */
};

/* The decapsulation's settings (decap_config, one entry). */
struct decap_settings {
	__be16 gue_port; /* 0: no GUE */
	__u16  pad;
};

/* An address found local (in decap_local) while decap_epoch was epoch. */
struct memo_entry {
	__u64            epoch;
	struct local_key key;
};

/* What decap_memo holds: the last outer and the last inner destination found local. */
struct decap_memo {
	struct memo_entry slot[2];
};

/* Tunnel packets by fate (decap_stats, per CPU, one entry). */
struct decap_counts {
	__u64 ipip;      /* decapsulated IPIP */
	__u64 gue;       /* decapsulated GUE */
	__u64 malformed; /* dropped: truncated or inconsistent */
	__u64 foreign;   /* dropped: the inner destination is not this host's */
};

/* This host's local prefixes, written by `sluice decap attach`. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct local_key);
	__type(value, __u8);
	__uint(max_entries, MAX_LOCAL);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} decap_local SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct decap_settings);
	__uint(max_entries, 1);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} decap_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct decap_counts);
	__uint(max_entries, 1);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} decap_stats SEC(".maps");

/* The version of decap_local's contents: `sluice decap attach` adds one after each change, which
 * voids every decap_memo entry found before it (a 64-bit count never wraps). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} decap_epoch SEC(".maps");

/* Per CPU, the destinations last found local, valid while their epoch is decap_epoch's (not
 * pinned: a cache, each program its own). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct decap_memo);
	__uint(max_entries, 1);
} decap_memo SEC(".maps");

/* What a packet turned out to be. */
enum fate {
	FATE_PASS,      /* not a tunnel packet for this host: untouched */
	FATE_IPIP,      /* decapsulate */
	FATE_GUE,       /* decapsulate */
	FATE_MALFORMED, /* drop */
	FATE_FOREIGN,   /* drop */
};

/* A tunnel packet's outer view. */
struct outer {
	__u32 len;    /* bytes of outer headers after the Ethernet header */
	__u32 remain; /* bytes after them: the inner packet, as the outer headers size it */
	__u8  family; /* the outer header's */
	__u8  inner;  /* the family the outer headers announce inside: AF_INET or AF_INET6 */
	__u8  fate;   /* FATE_IPIP or FATE_GUE */
};

/* The family an IP-in-IP protocol number announces (4: IPv4, 41: IPv6), or 0. */
static __always_inline __u8 ipip_family(__u8 proto)
{
	return proto == IPPROTO_IPIP ? AF_INET : proto == IPPROTO_IPV6 ? AF_INET6 : 0;
}

/* Counts a fate. */
static __always_inline void count(enum fate f)
{
	__u32                zero = 0;
	struct decap_counts *s = bpf_map_lookup_elem(&decap_stats, &zero);

	if (!s)
		return;
	if (f == FATE_IPIP)
		s->ipip++;
	else if (f == FATE_GUE)
		s->gue++;
	else if (f == FATE_MALFORMED)
		s->malformed++;
	else if (f == FATE_FOREIGN)
		s->foreign++;
}

/* The memo's slots: the outer destination's and the inner one's. */
enum memo_slot {
	MEMO_OUTER,
	MEMO_INNER,
};

/* True when a and b, local_key's, are the same key. */
static __always_inline bool same_key(const struct local_key *a, const struct local_key *b)
{
	const __u32 *x = (const __u32 *)a, *y = (const __u32 *)b;
	__u32        diff = 0;

	_Static_assert(sizeof(*a) == 24, "local_key is compared as 6 words");
#pragma unroll
	for (int i = 0; i < 6; i++)
		diff |= x[i] ^ y[i];
	return !diff;
}

/* True when addr (4 or 16 bytes by family) is one of this host's: found in slot's memo entry of
 * this epoch, else in decap_local (and then remembered there). */
static __always_inline bool is_local(const void *addr, __u8 family, enum memo_slot slot)
{
	struct local_key   k = {.prefixlen = 32 + 128, .family = family};
	__u32              zero = 0;
	__u64             *epoch = bpf_map_lookup_elem(&decap_epoch, &zero);
	struct decap_memo *memo = bpf_map_lookup_elem(&decap_memo, &zero);
	struct memo_entry *m;

	if (family == AF_INET)
		__builtin_memcpy(k.addr, addr, 4);
	else
		__builtin_memcpy(k.addr, addr, 16);
	if (!epoch || !memo)
		return bpf_map_lookup_elem(&decap_local, &k) != NULL;
	m = &memo->slot[slot == MEMO_INNER];
	if (m->epoch == *epoch && same_key(&m->key, &k))
		return true;
	if (!bpf_map_lookup_elem(&decap_local, &k))
		return false;
	m->epoch = *epoch;
	m->key = k;
	return true;
}

/* Reads the GUE header at off, after a UDP header of udp_len bytes: o->len grows by the GUE
 * header (none for variant 1), o->inner is the family it carries. FATE_MALFORMED when it is
 * neither variant 1 with an IPv4 or IPv6 version nibble nor an option-less variant 0 carrying
 * IP. */
static __always_inline int gue_header(struct __sk_buff *skb, __u32 off, __u32 udp_len,
				      struct outer *o)
{
	__u8 h[GUE_V0_LEN];

	if (udp_len < sizeof(struct udphdr) + 1 || bpf_skb_load_bytes(skb, off, h, 1))
		return FATE_MALFORMED;
	if ((h[0] >> 6) == 1) { /* variant 1: an IP header's version nibble, 4 or 6 */
		o->inner = h[0] >> 4 == 4 ? AF_INET : h[0] >> 4 == 6 ? AF_INET6 : 0;
		o->remain = udp_len - sizeof(struct udphdr);
		return o->inner ? FATE_GUE : FATE_MALFORMED;
	}
	if (udp_len < sizeof(struct udphdr) + GUE_V0_LEN ||
	    bpf_skb_load_bytes(skb, off, h, GUE_V0_LEN))
		return FATE_MALFORMED;
	/* variant 0, no control flag, hlen 0, proto IPIP/IPv6, no flags */
	o->inner = ipip_family(h[1]);
	if (h[0] != 0 || !o->inner || h[2] || h[3])
		return FATE_MALFORMED;
	o->len += GUE_V0_LEN;
	o->remain = udp_len - sizeof(struct udphdr) - GUE_V0_LEN;
	return FATE_GUE;
}

/* Reads the UDP header at off (o->len bytes of outer IP header before it, l3_remain after):
 * GUE when it goes to the GUE port. */
static __always_inline int udp_outer(struct __sk_buff *skb, __u32 off, __u32 l3_remain,
				     struct outer *o)
{
	__u32                  zero = 0;
	struct decap_settings *c = bpf_map_lookup_elem(&decap_config, &zero);
	struct udphdr          udp;
	__u32                  ulen;

	if (!c || !c->gue_port || bpf_skb_load_bytes(skb, off, &udp, sizeof(udp)))
		return FATE_PASS;
	if (udp.dest != c->gue_port)
		return FATE_PASS;
	ulen = bpf_ntohs(udp.len);
	if (ulen > l3_remain)
		return FATE_MALFORMED;
	o->len += sizeof(udp);
	return gue_header(skb, off + sizeof(udp), ulen, o);
}

/* Reads the outer IPv4 header. */
static __always_inline int outer4(struct __sk_buff *skb, struct outer *o)
{
	struct iphdr ip;
	__u32        tot;

	if (bpf_skb_load_bytes(skb, ETH_HLEN, &ip, sizeof(ip)) || ip.version != 4 || ip.ihl != 5 ||
	    ip.frag_off & bpf_htons(IP_MF | IP_OFFSET))
		return FATE_PASS;
	if (!ipip_family(ip.protocol) && ip.protocol != IPPROTO_UDP)
		return FATE_PASS;
	if (!is_local(&ip.daddr, AF_INET, MEMO_OUTER))
		return FATE_PASS;
	tot = bpf_ntohs(ip.tot_len);
	if (tot < sizeof(ip) || ETH_HLEN + tot > skb->len)
		return FATE_MALFORMED;
	o->family = AF_INET;
	o->len = sizeof(ip);
	if (ip.protocol == IPPROTO_UDP)
		return udp_outer(skb, ETH_HLEN + sizeof(ip), tot - sizeof(ip), o);
	o->remain = tot - sizeof(ip);
	o->inner = ipip_family(ip.protocol);
	return FATE_IPIP;
}

/* Reads the outer IPv6 header. */
static __always_inline int outer6(struct __sk_buff *skb, struct outer *o)
{
	struct ipv6hdr ip6;
	__u32          plen;

	if (bpf_skb_load_bytes(skb, ETH_HLEN, &ip6, sizeof(ip6)) || ip6.version != 6)
		return FATE_PASS;
	if (!ipip_family(ip6.nexthdr) && ip6.nexthdr != IPPROTO_UDP)
		return FATE_PASS;
	if (!is_local(&ip6.daddr, AF_INET6, MEMO_OUTER))
		return FATE_PASS;
	plen = bpf_ntohs(ip6.payload_len);
	if (ETH_HLEN + sizeof(ip6) + plen > skb->len)
		return FATE_MALFORMED;
	o->family = AF_INET6;
	o->len = sizeof(ip6);
	if (ip6.nexthdr == IPPROTO_UDP)
		return udp_outer(skb, ETH_HLEN + sizeof(ip6), plen, o);
	o->remain = plen;
	o->inner = ipip_family(ip6.nexthdr);
	return FATE_IPIP;
}

/* Checks the inner packet after the outer headers: of the family they announce, whole, and for
 * this host. */
static __always_inline int inner_check(struct __sk_buff *skb, const struct outer *o)
{
	__u32 off = ETH_HLEN + o->len;

	if (o->inner == AF_INET) {
		struct iphdr ip;

		if (o->remain < sizeof(ip) || bpf_skb_load_bytes(skb, off, &ip, sizeof(ip)) ||
		    ip.version != 4 || ip.ihl < 5 || bpf_ntohs(ip.tot_len) < ip.ihl * 4 ||
		    bpf_ntohs(ip.tot_len) > o->remain)
			return FATE_MALFORMED;
		return is_local(&ip.daddr, AF_INET, MEMO_INNER) ? o->fate : FATE_FOREIGN;
	}
	struct ipv6hdr ip6;

	if (o->remain < sizeof(ip6) || bpf_skb_load_bytes(skb, off, &ip6, sizeof(ip6)) ||
	    ip6.version != 6 || sizeof(ip6) + bpf_ntohs(ip6.payload_len) > o->remain)
		return FATE_MALFORMED;
	return is_local(&ip6.daddr, AF_INET6, MEMO_INNER) ? o->fate : FATE_FOREIGN;
}

/* Removes the outer headers of o, leaving the inner packet after the Ethernet header, whose
 * EtherType becomes the inner family's. */
static __always_inline long strip(struct __sk_buff *skb, const struct outer *o)
{
	__be16 proto = o->inner == AF_INET ? bpf_htons(ETH_P_IP) : bpf_htons(ETH_P_IPV6);
	__u64  flags =
                o->inner == AF_INET ? BPF_F_ADJ_ROOM_DECAP_L3_IPV4 : BPF_F_ADJ_ROOM_DECAP_L3_IPV6;

	if (o->inner != o->family &&
	    bpf_skb_store_bytes(skb, offsetof(struct ethhdr, h_proto), &proto, sizeof(proto), 0))
		return -1;
	return bpf_skb_adjust_room(skb, -(__s32)o->len, BPF_ADJ_ROOM_MAC, flags);
}

SEC("tc")
int sluice_decap(struct __sk_buff *skb)
{
	struct outer o = {};
	int          fate;

	if (skb->protocol == bpf_htons(ETH_P_IP))
		fate = outer4(skb, &o);
	else if (skb->protocol == bpf_htons(ETH_P_IPV6))
		fate = outer6(skb, &o);
	else
		return TC_ACT_OK;
	if (fate == FATE_IPIP || fate == FATE_GUE) {
		o.fate = fate;
		fate = inner_check(skb, &o);
	}
	if (fate == FATE_PASS)
		return TC_ACT_OK;
	if ((fate == FATE_IPIP || fate == FATE_GUE) && strip(skb, &o))
		fate = FATE_MALFORMED;
	count(fate);
	return fate == FATE_IPIP || fate == FATE_GUE ? TC_ACT_OK : TC_ACT_SHOT;
}

char LICENSE[] SEC("license") = "GPL";
