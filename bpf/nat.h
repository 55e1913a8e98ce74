/* Sluice eBPF datapath: the TCP/UDP rewrites (addresses, ports, TTL, MACs) with incremental
 * checksums, on tc (helpers only) and XDP (direct writes).
 *
 * tc: the program never writes packet memory directly, as that makes the verifier add a prologue
 * that unclones every cloned skb (TCP transmits clones), VIP traffic or not. The fixed IP header
 * goes back with one bpf_skb_store_bytes (within the headers a local sender's clone may write, so
 * it does not unclone), and the MACs are left to bpf_redirect_neigh; the TCP/UDP checksum to
 * bpf_l4_csum_replace, which also handles CHECKSUM_PARTIAL skbs (a local sender's, on veth),
 * whose checksum field holds the pseudo-header sum that only the address change must reach:
 * BPF_F_PSEUDO_HDR for the address difference, and a separate call without it for the ports.
 * CHECKSUM_COMPLETE skbs keep a valid skb->csum: that helper corrects it for IPv4's address
 * change, and for IPv6 (where the change is the hop limit, and the helper's IPv4-style
 * correction must be undone on kernels without BPF_F_IPV6) bpf_csum_update adds the rest.
 *
 * XDP: frames carry complete checksums; everything is rewritten in place. */
#ifndef SLUICE_NAT_H
#define SLUICE_NAT_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include "csum.h"
#include "forward.h"

/* Checksum differences of a rewrite. */
struct csum_diffs {
	__u32 addrs; /* source and destination addresses */
	__u32 ports; /* source and destination ports */
	__u32 ttl;   /* the 16-bit word holding the TTL or hop limit */
};

/* The fixed IP header, staged for one store. */
union l3_frame {
	struct iphdr   v4;
	struct ipv6hdr v6;
};

/* The difference a TTL or hop limit decrement makes to the 16-bit word holding it. */
static __always_inline __u32 ttl_diff(const struct packet *p)
{
	union {
		__u8  b[2];
		__u16 w;
	} old, new;

	/* IPv4: ttl, protocol; IPv6: next header, hop limit */
	if (p->key.family == AF_INET) {
		old.b[0] = p->ttl;
		old.b[1] = p->key.proto;
		new.b[0] = p->ttl - 1;
		new.b[1] = p->key.proto;
	} else {
		old.b[0] = p->key.proto;
		old.b[1] = p->ttl;
		new.b[0] = p->key.proto;
		new.b[1] = p->ttl - 1;
	}
	return csum_diff16(old.w, new.w);
}

/* The difference replacing the addresses of old with those of new makes. */
static __always_inline __u32 addrs_diff(const struct flow_key *old, const struct flow_key *new)
{
	int n = old->family == AF_INET ? 1 : 4;

	return csum_add(csum_diff_words((const __u32 *)old->src, (const __u32 *)new->src, n),
			csum_diff_words((const __u32 *)old->dst, (const __u32 *)new->dst, n));
}

/* The difference replacing the ports of old with those of new makes. */
static __always_inline __u32 ports_diff(const struct flow_key *old, const struct flow_key *new)
{
	return csum_diff32(*(const __u32 *)&old->sport, *(const __u32 *)&new->sport);
}

/* The checksum differences of rewriting packet p per plan pl, routed or not. */
static __always_inline void diffs_of(const struct packet *p, const struct plan *pl, bool routed,
				     struct csum_diffs *d)
{
	d->addrs = pl->nat ? addrs_diff(&p->key, &pl->out) : 0;
	d->ports = pl->nat ? ports_diff(&p->key, &pl->out) : 0;
	d->ttl = routed ? ttl_diff(p) : 0;
}

/* Rewrites an IPv4 header's addresses and TTL and fixes its checksum. */
static __always_inline void ipv4_rewrite(struct iphdr *ip, const struct plan *pl,
					 const struct csum_diffs *d, bool routed)
{
	if (routed)
		ip->ttl--;
	__builtin_memcpy(&ip->saddr, pl->out.src, 4);
	__builtin_memcpy(&ip->daddr, pl->out.dst, 4);
	ip->check = csum_apply(ip->check, csum_add(d->addrs, d->ttl));
}

/* Rewrites an IPv6 header's addresses and hop limit. */
static __always_inline void ipv6_rewrite(struct ipv6hdr *ip6, const struct plan *pl, bool routed)
{
	if (routed)
		ip6->hop_limit--;
	__builtin_memcpy(&ip6->saddr, pl->out.src, 16);
	__builtin_memcpy(&ip6->daddr, pl->out.dst, 16);
}

/* Fixes the TCP/UDP checksum of a nat packet for the address change and rewrites the ports. */
static __always_inline int tc_rewrite_l4(struct __sk_buff *skb, const struct packet *p,
					 const struct plan *pl, const struct csum_diffs *d)
{
	bool  udp = p->key.proto == IPPROTO_UDP;
	__u32 csum_off =
		p->l4_off + (udp ? offsetof(struct udphdr, check) : offsetof(struct tcphdr, check));
	__u64 flags = udp ? BPF_F_MARK_MANGLED_0 : 0;

	if (bpf_l4_csum_replace(skb, csum_off, 0, d->addrs, flags | BPF_F_PSEUDO_HDR))
		return -1;
	if (*(const __u32 *)&pl->out.sport == *(const __u32 *)&p->key.sport)
		return 0;
	if (bpf_skb_store_bytes(skb, p->l4_off, &pl->out.sport, 4, 0))
		return -1;
	return bpf_l4_csum_replace(skb, csum_off, 0, d->ports, flags);
}

/* Rewrites a TCP/UDP packet on tc per plan, the TTL when routed. The MACs are the neighbour
 * layer's (bpf_redirect_neigh). */
static __always_inline int tc_rewrite(struct __sk_buff *skb, const struct packet *p,
				      const struct plan *pl, bool routed)
{
	void             *data = (void *)(long)skb->data, *data_end = (void *)(long)skb->data_end;
	union l3_frame    h;
	struct csum_diffs d;
	bool              v6 = p->key.family == AF_INET6;
	__u32             l3_len = v6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr);

	if (!routed && !pl->nat)
		return 0;
	diffs_of(p, pl, routed, &d);
	if (v6) {
		struct ipv6hdr *ip6 = data + ETH_HLEN;

		if ((void *)(ip6 + 1) > data_end)
			return -1;
		h.v6 = *ip6;
		ipv6_rewrite(&h.v6, pl, routed);
	} else {
		struct iphdr *ip = data + ETH_HLEN;

		if ((void *)(ip + 1) > data_end)
			return -1;
		h.v4 = *ip;
		ipv4_rewrite(&h.v4, pl, &d, routed);
	}
	if (bpf_skb_store_bytes(skb, ETH_HLEN, &h, l3_len, 0))
		return -1;
	if (pl->nat && tc_rewrite_l4(skb, p, pl, &d))
		return -1;
	/* IPv6 CHECKSUM_COMPLETE: the hop limit's difference, plus what bpf_l4_csum_replace took */
	if (v6)
		bpf_csum_update(skb, csum_add(d.addrs, d.ttl));
	return 0;
}

/* Rewrites the ports and checksum of a nat packet's TCP/UDP header at l4, in place. */
static __always_inline int xdp_rewrite_l4(void *l4, void *data_end, const struct packet *p,
					  const struct plan *pl, const struct csum_diffs *d)
{
	__u32 diff = csum_add(d->addrs, d->ports);

	if (p->key.proto == IPPROTO_TCP) {
		struct tcphdr *tcp = l4;

		if ((void *)(tcp + 1) > data_end)
			return -1;
		tcp->source = pl->out.sport;
		tcp->dest = pl->out.dport;
		tcp->check = csum_apply(tcp->check, diff);
	} else {
		struct udphdr *udp = l4;

		if ((void *)(udp + 1) > data_end)
			return -1;
		udp->source = pl->out.sport;
		udp->dest = pl->out.dport;
		udp->check = csum_apply_udp(udp->check, diff);
	}
	return 0;
}

/* Rewrites a TCP/UDP packet on XDP per plan: MACs from fib (when set), TTL when routed. */
static __always_inline int xdp_rewrite(struct xdp_md *ctx, const struct packet *p,
				       const struct plan *pl, const struct bpf_fib_lookup *fib,
				       bool routed)
{
	void             *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
	struct ethhdr    *eth = data;
	struct csum_diffs d;
	__u32             l4_off = p->l4_off;

	if (!routed && !pl->nat)
		return 0;
	diffs_of(p, pl, routed, &d);
	if (p->key.family == AF_INET6) {
		struct ipv6hdr *ip6 = data + ETH_HLEN;

		if ((void *)(ip6 + 1) > data_end)
			return -1;
		ipv6_rewrite(ip6, pl, routed);
	} else {
		struct iphdr *ip = data + ETH_HLEN;

		if ((void *)(ip + 1) > data_end)
			return -1;
		ipv4_rewrite(ip, pl, &d, routed);
	}
	if (fib) {
		__builtin_memcpy(eth->h_dest, fib->dmac, ETH_ALEN);
		__builtin_memcpy(eth->h_source, fib->smac, ETH_ALEN);
	}
	if (!pl->nat)
		return 0;
	if (l4_off > ETH_HLEN + 60)
		return -1;
	return xdp_rewrite_l4(data + l4_off, data_end, p, pl, &d);
}

/* Routes a planned TCP/UDP packet received on ifindex, rewrites it for the way it leaves and
 * sends it on. */
static __always_inline int forward(void *ctx, bool xdp, const struct packet *p,
				   const struct plan *pl, __u32 ifindex)
{
	struct bpf_fib_lookup        fib;
	__u8                         why;
	int                          egress = route(ctx, xdp, p, pl, ifindex, &fib, &why);
	const struct bpf_fib_lookup *macs = egress == EGRESS_REDIRECT ? &fib : NULL;
	/* tc dsr: the neighbour layer writes the L2 header and nothing else changes (TTL kept) */
	bool routed = (egress == EGRESS_REDIRECT || egress == EGRESS_NEIGH) && (xdp || pl->nat);
	int  verdict;

	if (egress == EGRESS_DROP) {
		count_outcome(pl, p->l3_len, false, why);
		return verdict_drop(xdp);
	}
	if (xdp ? xdp_rewrite(ctx, p, pl, macs, routed) : tc_rewrite(ctx, p, pl, routed))
		verdict = verdict_drop(xdp);
	else
		verdict = leave(xdp, egress, &fib);
	count_outcome(pl, p->l3_len, verdict != verdict_drop(xdp), UNFORWARDED_NONE);
	return verdict;
}

#endif
