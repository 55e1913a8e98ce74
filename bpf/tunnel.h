/* Sluice eBPF datapath: mode tunnel, dsr to routed backends. The client's packet is sent on
 * unchanged inside an outer header from the balancer to the backend, routed by bpf_fib_lookup:
 *
 *   ipip  an outer IPv4 header, protocol 4 for IPv4 and 41 for IPv6 inside (6in4), or an outer
 *         IPv6 header, next header 41 for IPv6 and 4 for IPv4 inside (4in6): 20 or 40 bytes;
 *   gue   GUE variant 1 (RFC draft-ietf-intarea-gue, as Katran sends it): the IP packet directly
 *         after an outer UDP header to the service's gue_port, whose source port is a hash of
 *         the inner 5-tuple (32768-65535) so that ECMP routers spread the flows: 28 or 48 bytes.
 *         The UDP checksum is 0 (RFC 6935 allows it for tunnels over IPv6 too).
 *
 * The outer header is of the backend's family (its struct backend), which may differ from the
 * VIP's, the inner packet's. It copies the inner DSCP and ECN (the TOS byte, or the traffic
 * class) and, IPv4 in IPv4, the DF bit (IPv6 inside IPv4 leaves DF clear, as Katran does); its
 * TTL/hop limit is TUNNEL_TTL and IPv6's flow label carries the flow hash too. An outer IPv4
 * header's identification is 0 when DF is set (an atomic datagram, RFC 6864, as the kernel's ipip
 * sets it) and random otherwise, so that fragments of two packets never share one. The outer source
 * is the service's tunnel_source, or the route's preferred source (BPF_FIB_LOOKUP_SRC). The
 * inner packet is not touched: not even its TTL.
 *
 * A packet that no longer fits the egress device's MTU once encapsulated (GSO packets aside: the
 * kernel segments them for the new headers) is answered from the VIP with an ICMP fragmentation
 * needed (IPv4) or packet too big (IPv6) giving the MTU less the encapsulation, sent back out of
 * the interface it came from, as Katran's ICMP_TOOBIG_GENERATION does, and counted. */
#ifndef SLUICE_TUNNEL_H
#define SLUICE_TUNNEL_H

#include "icmp.h"

#define TUNNEL_TTL       64     /* the outer header's TTL or hop limit */
#define TUNNEL_HASH_SALT 0x7e11 /* flow_hash salt of the GUE source port and flow label */
#define GUE_SPORT_BASE   0x8000 /* GUE source ports are 32768-65535 */
#define ICMP_FRAG_NEEDED 4      /* the code of destination unreachable */
#define TOOBIG_QUOTE4    64  /* bytes of the client's packet an ICMP fragmentation needed quotes */
#define TOOBIG_QUOTE6    128 /* and an ICMPv6 packet too big */

/* An outer IPv4 header and GUE's UDP header. */
struct encap4 {
	struct iphdr  ip;
	struct udphdr udp;
} __attribute__((packed));

/* An outer IPv6 header and GUE's UDP header. */
struct encap6 {
	struct ipv6hdr ip;
	struct udphdr  udp;
} __attribute__((packed));

/* An ICMP fragmentation needed from its IP header, quoting the client's packet. */
struct toobig4 {
	struct iphdr    ip;
	struct icmp_hdr icmp;
	__u8            quote[TOOBIG_QUOTE4];
};

/* An ICMPv6 packet too big from its IP header, quoting the client's packet. */
struct toobig6 {
	struct ipv6hdr  ip;
	struct icmp_hdr icmp;
	__u8            quote[TOOBIG_QUOTE6];
};

/* The tunnel path's working set, kept in a per-CPU map rather than on the BPF stack. */
struct tunnel_work {
	union {
		struct encap4  e4;
		struct encap6  e6;
		struct toobig4 t4;
		struct toobig6 t6;
	};
	struct bpf_fib_lookup fib;
	struct tunnel         tn;
};

/* Per-CPU working space of the tunnel path (no state survives a packet; not pinned). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct tunnel_work));
	__uint(max_entries, 1);
} tunnel_scratch SEC(".maps");

/* Bytes an encapsulation adds, in an outer IPv4 header (out4) or IPv6 one. */
static __always_inline __u32 tunnel_overhead(const struct tunnel *tn, bool out4)
{
	return (out4 ? sizeof(struct iphdr) : sizeof(struct ipv6hdr)) +
	       (tn->kind == TUNNEL_GUE ? sizeof(struct udphdr) : 0);
}

/* The checksum of an IPv4 header without options. */
static __always_inline __sum16 ipv4_csum(const struct iphdr *ip)
{
	const __u16 *w = (const __u16 *)ip;
	__u32        s = 0;

#pragma unroll
	for (int i = 0; i < (int)sizeof(*ip) / 2; i++)
		s += w[i];
	return csum_fold(s);
}

/* Counts a tunnel packet's fate for service id. */
static __always_inline void tunnel_count(__u32 id, bool encapsulated, bool too_big)
{
	struct tunnel_counts *c;

	if (count_nothing || !(c = bpf_map_lookup_elem(&tunnel_stats, &id)))
		return;
	if (encapsulated)
		c->encapsulated++;
	else if (too_big)
		c->too_big++;
	else
		c->no_source++;
}

/* The protocol (IPv4) or next header (IPv6) of a tunnel's outer header: UDP for GUE, else the
 * inner packet's family's, 4 or 41, whatever the outer family. */
static __always_inline __u8 tunnel_proto(const struct tunnel *tn, const struct packet *p)
{
	return tn->kind == TUNNEL_GUE     ? IPPROTO_UDP
	       : p->key.family == AF_INET ? IPPROTO_IPIP
					  : IPPROTO_IPV6;
}

/* Routes a tunnel packet to its backend (pl->nexthop, of the outer family: IPv4 for out4) from
 * ifindex: fills w->fib, the outer source included, and says how it leaves. Anything but a route
 * drops it: the stack would route it by the VIP. */
static __always_inline int tunnel_route(void *ctx, bool xdp, const struct packet *p,
					const struct plan *pl, __u32 ifindex, struct tunnel_work *w,
					bool out4, __u8 *why)
{
	__u32 flags = xdp ? 0 : BPF_FIB_LOOKUP_SKIP_NEIGH;
	long  rc;
	int   egress;

	__builtin_memset(&w->fib, 0, sizeof(w->fib));
	w->fib.family = out4 ? AF_INET : AF_INET6;
	w->fib.l4_protocol = tunnel_proto(&w->tn, p);
	w->fib.ifindex = ifindex;
	if (addr_unset(w->tn.src, out4 ? 4 : 16))
		flags |= BPF_FIB_LOOKUP_SRC;
	if (out4) {
		__builtin_memcpy(&w->fib.ipv4_src, w->tn.src, 4);
		__builtin_memcpy(&w->fib.ipv4_dst, pl->nexthop, 4);
	} else {
		__builtin_memcpy(w->fib.ipv6_src, w->tn.src, 16);
		__builtin_memcpy(w->fib.ipv6_dst, pl->nexthop, 16);
	}
	rc = bpf_fib_lookup(ctx, &w->fib, sizeof(w->fib), flags);
	/* tc checks the packet as it is against the route's device once the route is found (the
	 * lookup is complete): whether it fits once encapsulated is bpf_check_mtu's to say */
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED && !xdp)
		rc = BPF_FIB_LKUP_RET_SUCCESS;
	if (rc == BPF_FIB_LKUP_RET_NO_SRC_ADDR) {
		*why = UNFORWARDED_NONE;
		return EGRESS_STACK; /* the caller counts no_source */
	}
	egress = egress_of(rc, xdp, false, why);
	if (egress == EGRESS_STACK) {
		*why = UNFORWARDED_NO_ROUTE;
		return EGRESS_DROP;
	}
	return egress;
}

/* Writes the outer headers of a tunnel packet into w, an outer IPv4 header for out4, else IPv6;
 * returns their length. */
static __always_inline __u32 tunnel_headers(struct tunnel_work *w, const struct packet *p,
					    const struct plan *pl, bool out4)
{
	bool           in4 = p->key.family == AF_INET;
	bool           gue = w->tn.kind == TUNNEL_GUE;
	__u32          len = tunnel_overhead(&w->tn, out4);
	__u32          hash = gue || !out4 ? flow_hash(&p->key, TUNNEL_HASH_SALT) : 0;
	__u8           tos = p->tos;
	struct udphdr *udp = out4 ? &w->e4.udp : &w->e6.udp;

	if (out4) {
		__builtin_memset(&w->e4, 0, sizeof(w->e4));
		w->e4.ip.version = 4;
		w->e4.ip.ihl = 5;
		w->e4.ip.tos = tos;
		w->e4.ip.tot_len = bpf_htons(p->l3_len + len);
		if (in4)
			w->e4.ip.frag_off = p->df ? bpf_htons(IP_DF) : 0;
		/* the identification of an atomic datagram (DF) is 0, as the kernel's ipip sets it;
		 * one the network may fragment gets a random one, a new one per packet */
		if (!w->e4.ip.frag_off)
			w->e4.ip.id = (__be16)bpf_get_prandom_u32();
		w->e4.ip.ttl = TUNNEL_TTL;
		w->e4.ip.protocol = tunnel_proto(&w->tn, p);
		w->e4.ip.saddr = w->fib.ipv4_src;
		__builtin_memcpy(&w->e4.ip.daddr, pl->nexthop, 4);
		w->e4.ip.check = ipv4_csum(&w->e4.ip);
	} else {
		__builtin_memset(&w->e6, 0, sizeof(w->e6));
		/* version, traffic class and flow label: the inner's class, the flow hash's label */
		*(__be32 *)&w->e6.ip = bpf_htonl(6 << 28 | (__u32)tos << 20 | (hash & 0xfffff));
		w->e6.ip.payload_len = bpf_htons(p->l3_len + (gue ? sizeof(*udp) : 0));
		w->e6.ip.nexthdr = tunnel_proto(&w->tn, p);
		w->e6.ip.hop_limit = TUNNEL_TTL;
		__builtin_memcpy(&w->e6.ip.saddr, w->fib.ipv6_src, 16);
		__builtin_memcpy(&w->e6.ip.daddr, pl->nexthop, 16);
	}
	if (gue) {
		udp->source = bpf_htons(GUE_SPORT_BASE | (hash & 0x7fff));
		udp->dest = w->tn.gue_port;
		udp->len = bpf_htons(p->l3_len + sizeof(*udp));
	}
	return len;
}

/* Builds in w the ICMP error telling the client of packet p that only mtu bytes fit; the
 * client's packet is already in the quote. Returns its length from the IP header. */
static __always_inline __u32 toobig_build(struct tunnel_work *w, const struct packet *p, __u32 mtu)
{
	__u32 sum;

	if (p->key.family == AF_INET) {
		struct toobig4 *t = &w->t4;

		__builtin_memset(t, 0, offsetof(struct toobig4, quote));
		t->ip.version = 4;
		t->ip.ihl = 5;
		t->ip.tot_len = bpf_htons(sizeof(*t));
		t->ip.ttl = TUNNEL_TTL;
		t->ip.protocol = IPPROTO_ICMP;
		__builtin_memcpy(&t->ip.saddr, p->key.dst, 4);
		__builtin_memcpy(&t->ip.daddr, p->key.src, 4);
		t->ip.check = ipv4_csum(&t->ip);
		t->icmp.type = ICMP_DEST_UNREACH;
		t->icmp.code = ICMP_FRAG_NEEDED;
		t->icmp.rest = bpf_htonl(mtu & 0xffff);
		sum = bpf_csum_diff(NULL, 0, (__be32 *)&t->icmp, sizeof(*t) - sizeof(t->ip), 0);
		t->icmp.checksum = csum_fold(sum);
		return sizeof(*t);
	}
	struct toobig6 *t = &w->t6;
	__u32           plen = sizeof(*t) - sizeof(t->ip);

	__builtin_memset(t, 0, offsetof(struct toobig6, quote));
	t->ip.version = 6;
	t->ip.payload_len = bpf_htons(plen);
	t->ip.nexthdr = IPPROTO_ICMPV6;
	t->ip.hop_limit = TUNNEL_TTL;
	__builtin_memcpy(&t->ip.saddr, p->key.dst, 16);
	__builtin_memcpy(&t->ip.daddr, p->key.src, 16);
	t->icmp.type = ICMPV6_PKT_TOOBIG;
	t->icmp.rest = bpf_htonl(mtu);
	/* the pseudo header: the addresses, the length and the next header */
	sum = bpf_csum_diff(NULL, 0, (__be32 *)&t->ip.saddr, 32, 0);
	sum = csum_add(sum, bpf_htonl(plen));
	sum = csum_add(sum, bpf_htonl(IPPROTO_ICMPV6));
	sum = bpf_csum_diff(NULL, 0, (__be32 *)&t->icmp, plen, sum);
	t->icmp.checksum = csum_fold(sum);
	return sizeof(*t);
}

/* Swaps a frame's MACs, so that it goes back to where it came from. */
static __always_inline long ctx_swap_macs(void *ctx, bool xdp)
{
	__u8 macs[2 * ETH_ALEN], swapped[2 * ETH_ALEN];

	if (ctx_load(ctx, xdp, 0, macs, sizeof(macs)))
		return -1;
	__builtin_memcpy(swapped, macs + ETH_ALEN, ETH_ALEN);
	__builtin_memcpy(swapped + ETH_ALEN, macs, ETH_ALEN);
	return xdp ? bpf_xdp_store_bytes(ctx, 0, swapped, sizeof(swapped))
		   : bpf_skb_store_bytes(ctx, 0, swapped, sizeof(swapped), 0);
}

/* Turns packet p, too big for mtu bytes once encapsulated, into the ICMP error that says so and
 * sends it back out of the interface it came in on. */
static __always_inline int toobig_send(void *ctx, bool xdp, const struct packet *p,
				       struct tunnel_work *w, __u32 mtu)
{
	bool  v4 = p->key.family == AF_INET;
	__u32 quote = v4 ? TOOBIG_QUOTE4 : TOOBIG_QUOTE6, len, frame;
	void *at = v4 ? (void *)w->t4.quote : (void *)w->t6.quote;

	if (p->l3_len < quote || ctx_load(ctx, xdp, ETH_HLEN, at, quote))
		return verdict_drop(xdp);
	len = toobig_build(w, p, mtu);
	frame = ETH_HLEN + len;
	if (xdp) {
		if (bpf_xdp_adjust_tail(ctx, (int)frame - (int)bpf_xdp_get_buff_len(ctx)))
			return XDP_DROP;
	} else if (bpf_skb_change_tail(ctx, frame, 0)) {
		return TC_ACT_SHOT;
	}
	if ((v4 ? ctx_store(ctx, xdp, ETH_HLEN, &w->t4, sizeof(w->t4))
		: ctx_store(ctx, xdp, ETH_HLEN, &w->t6, sizeof(w->t6))) ||
	    ctx_swap_macs(ctx, xdp))
		return verdict_drop(xdp);
	if (xdp)
		return XDP_TX;
	return bpf_redirect(((struct __sk_buff *)ctx)->ingress_ifindex, 0);
}

/* Adds the outer headers of w (len bytes, IPv4 for out4) in front of the IP header, on tc: the
 * kernel marks the skb encapsulated, so GSO packets are segmented with the outer headers, and
 * sets skb->protocol to the outer family; the EtherType follows it when the family changes. */
static __always_inline int tunnel_push_tc(struct __sk_buff *skb, const struct tunnel_work *w,
					  bool out4, __u32 len)
{
	__u64  flags = out4 ? BPF_F_ADJ_ROOM_ENCAP_L3_IPV4 : BPF_F_ADJ_ROOM_ENCAP_L3_IPV6;
	__be16 proto = out4 ? bpf_htons(ETH_P_IP) : bpf_htons(ETH_P_IPV6);

	if (w->tn.kind == TUNNEL_GUE)
		flags |= BPF_F_ADJ_ROOM_ENCAP_L4_UDP;
	if (skb->protocol != proto &&
	    bpf_skb_store_bytes(skb, offsetof(struct ethhdr, h_proto), &proto, sizeof(proto), 0))
		return -1;
	if (bpf_skb_adjust_room(skb, len, BPF_ADJ_ROOM_MAC, flags))
		return -1;
	if (out4)
		return w->tn.kind == TUNNEL_GUE ? bpf_skb_store_bytes(skb, ETH_HLEN, &w->e4, 28, 0)
						: bpf_skb_store_bytes(skb, ETH_HLEN, &w->e4, 20, 0);
	return w->tn.kind == TUNNEL_GUE ? bpf_skb_store_bytes(skb, ETH_HLEN, &w->e6, 48, 0)
					: bpf_skb_store_bytes(skb, ETH_HLEN, &w->e6, 40, 0);
}

/* Adds the outer headers of w (len bytes, IPv4 for out4) in front of the IP header, on XDP,
 * with the route's MACs. */
static __always_inline int tunnel_push_xdp(struct xdp_md *ctx, const struct tunnel_work *w,
					   bool out4, __u32 len)
{
	void          *data, *data_end;
	struct ethhdr *eth;

	if (bpf_xdp_adjust_head(ctx, -(int)len))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) + sizeof(struct encap6) > data_end)
		return -1;
	__builtin_memcpy(eth->h_dest, w->fib.dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, w->fib.smac, ETH_ALEN);
	eth->h_proto = out4 ? bpf_htons(ETH_P_IP) : bpf_htons(ETH_P_IPV6);
	if (out4 && w->tn.kind == TUNNEL_GUE)
		__builtin_memcpy(eth + 1, &w->e4, 28);
	else if (out4)
		__builtin_memcpy(eth + 1, &w->e4, 20);
	else if (w->tn.kind == TUNNEL_GUE)
		__builtin_memcpy(eth + 1, &w->e6, 48);
	else
		__builtin_memcpy(eth + 1, &w->e6, 40);
	return 0;
}

/* Encapsulates a planned packet of a tunnel service received on ifindex and sends it to its
 * backend, in an outer header of the backend's family, or answers it with ICMP too big. */
static __always_inline int tunnel_forward(void *ctx, bool xdp, const struct packet *p,
					  const struct plan *pl, __u32 ifindex)
{
	__u32               zero = 0, id = pl->svc_id, bid = pl->backend_id, mtu = 0, len;
	struct tunnel_work *w = bpf_map_lookup_elem(&tunnel_scratch, &zero);
	struct tunnel      *tn = bpf_map_lookup_elem(&service_tunnels, &id);
	struct backend     *b = bpf_map_lookup_elem(&backends, &bid);
	int                 egress, err;
	bool                out4;
	__u8                why;

	if (!w || !tn || !b || (tn->kind != TUNNEL_IPIP && tn->kind != TUNNEL_GUE))
		return verdict_drop(xdp);
	w->tn = *tn;
	out4 = b->family == AF_INET;
	egress = tunnel_route(ctx, xdp, p, pl, ifindex, w, out4, &why);
	if (egress == EGRESS_STACK) { /* no source address */
		tunnel_count(id, false, false);
		return verdict_drop(xdp);
	}
	if (egress == EGRESS_DROP) {
		count_outcome(pl, p->l3_len, false, why);
		return verdict_drop(xdp);
	}
	len = tunnel_overhead(&w->tn, out4);
	if (bpf_check_mtu(ctx, w->fib.ifindex, &mtu, len, 0)) {
		tunnel_count(id, false, true);
		count_outcome(pl, p->l3_len, false, UNFORWARDED_NONE);
		return toobig_send(ctx, xdp, p, w, mtu > len ? mtu - len : 0);
	}
	tunnel_headers(w, p, pl, out4);
	err = xdp ? tunnel_push_xdp(ctx, w, out4, len) : tunnel_push_tc(ctx, w, out4, len);
	if (!err)
		tunnel_count(id, true, false);
	count_outcome(pl, p->l3_len, !err, UNFORWARDED_NONE);
	return err ? verdict_drop(xdp) : leave(xdp, egress, &w->fib);
}

#endif
