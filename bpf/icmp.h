/* Sluice eBPF datapath: ICMP errors about tracked flows (IPv4 destination unreachable,
 * fragmentation needed included, and time exceeded; ICMPv6 destination unreachable, packet too
 * big and time exceeded) reach the side that sent the offending packet, translated by the quoted
 * 5-tuple:
 *
 *   about a packet sent to a backend (nat/fullnat: the backend's port unreachable, a backend-side
 *   router's fragmentation needed): the quoted destination becomes VIP:vport, fullnat's quoted
 *   source client:cport, the outer destination the client and an outer source that was the
 *   backend the VIP; routed to the client;
 *
 *   about a packet from a VIP to a client (a client-side router's fragmentation needed for a
 *   backend's reply): routed to the flow's backend (dsr: the flow's, or Maglev's pick when the
 *   flow is unknown): dsr leaves it untouched (the backend holds the VIP); nat rewrites the outer
 *   destination and the quoted source to the backend; fullnat also the outer source and the quoted
 *   destination to the balancer's address and the flow's port.
 *
 * The quoted IP header checksum, the quoted UDP checksum and a quoted TCP checksum (when quoted)
 * follow the change, and the ICMP checksum covers all of it. Errors with IP options (outer or
 * quoted), quoting a non-first fragment or anything but TCP/UDP pass to the stack. The headers
 * are copied out, rewritten and written back with the load/store helpers of tc and XDP alike. */
#ifndef SLUICE_ICMP_H
#define SLUICE_ICMP_H

#include "forward.h"
#include "nat.h"

/* An IPv4 ICMP error from its IP header to the first 8 quoted L4 bytes. */
struct icmp4_frame {
	struct iphdr    outer;
	struct icmp_hdr icmp;
	struct iphdr    inner;
	__be16          sport;
	__be16          dport;
	__be16          w2; /* UDP length, or half the TCP sequence number */
	__sum16         w3; /* UDP checksum, or the other half */
};

/* An ICMPv6 error from its IP header to the first 8 quoted L4 bytes. */
struct icmp6_frame {
	struct ipv6hdr  outer;
	struct icmp_hdr icmp;
	struct ipv6hdr  inner;
	__be16          sport;
	__be16          dport;
	__be16          w2;
	__sum16         w3;
};

#define QUOTED_TCP_CHECK 16 /* offset of the checksum in a quoted TCP header */

/* Copies len bytes at off out of the packet. */
static __always_inline long ctx_load(void *ctx, bool xdp, __u32 off, void *to, __u32 len)
{
	return xdp ? bpf_xdp_load_bytes(ctx, off, to, len) : bpf_skb_load_bytes(ctx, off, to, len);
}

/* Writes len bytes at off, an even offset from the IP header (tc keeps a CHECKSUM_COMPLETE
 * skb->csum right). */
static __always_inline long ctx_store(void *ctx, bool xdp, __u32 off, void *from, __u32 len)
{
	return xdp ? bpf_xdp_store_bytes(ctx, off, from, len)
		   : bpf_skb_store_bytes(ctx, off, from, len, BPF_F_RECOMPUTE_CSUM);
}

/* Writes the MACs of a route lookup. */
static __always_inline long ctx_store_macs(void *ctx, bool xdp, const struct bpf_fib_lookup *fib)
{
	__u8 macs[2 * ETH_ALEN];

	__builtin_memcpy(macs, fib->dmac, ETH_ALEN);
	__builtin_memcpy(macs + ETH_ALEN, fib->smac, ETH_ALEN);
	return xdp ? bpf_xdp_store_bytes(ctx, 0, macs, sizeof(macs))
		   : bpf_skb_store_bytes(ctx, 0, macs, sizeof(macs), 0);
}

/* True for the ICMP types that quote an offending packet. */
static __always_inline bool icmp_is_error(const struct packet *p)
{
	if (p->key.family == AF_INET)
		return p->key.proto == IPPROTO_ICMP &&
		       (p->icmp_type == ICMP_DEST_UNREACH || p->icmp_type == ICMP_TIME_EXCEEDED);
	return p->key.proto == IPPROTO_ICMPV6 &&
	       (p->icmp_type == ICMPV6_DEST_UNREACH || p->icmp_type == ICMPV6_PKT_TOOBIG ||
		p->icmp_type == ICMPV6_TIME_EXCEED);
}

/* The 5-tuple of the other direction. */
static __always_inline void flow_reverse(struct flow_key *r, const struct flow_key *k)
{
	*r = *k;
	__builtin_memcpy(r->src, k->dst, sizeof(r->src));
	__builtin_memcpy(r->dst, k->src, sizeof(r->dst));
	r->sport = k->dport;
	r->dport = k->sport;
}

/* Plans an error about a packet sent to a backend, whose flow's client side is r. */
static __always_inline int icmp_to_client(const struct packet *p, const struct flow_key *q,
					  const struct reverse *r, struct plan *pl,
					  struct flow_key *qout)
{
	__builtin_memcpy(qout->src, r->client, sizeof(qout->src));
	__builtin_memcpy(qout->dst, r->vip, sizeof(qout->dst));
	qout->sport = r->cport;
	qout->dport = r->vport;
	if (addr_eq(p->key.src, q->dst))
		__builtin_memcpy(pl->out.src, r->vip, sizeof(pl->out.src));
	__builtin_memcpy(pl->out.dst, r->client, sizeof(pl->out.dst));
	__builtin_memcpy(pl->nexthop, r->client, sizeof(pl->nexthop));
	pl->nat = 1;
	pl->svc_id = r->service_id;
	return VERDICT_FORWARD;
}

/* Plans an error about a packet from a service's VIP to the client of flow ck. */
static __always_inline int icmp_to_backend(const struct service *svc, const struct flow_key *ck,
					   struct plan *pl, struct flow_key *qout)
{
	struct flow    *f = bpf_map_lookup_elem(&flows, ck);
	struct globals *g = NULL;
	struct target   t = {};
	__u32           slot;

	if (svc->mode != MODE_NAT && svc->mode != MODE_FULLNAT && svc->mode != MODE_DSR)
		return VERDICT_PASS;
	if (f) {
		t.b = backend_get(f->backend_id, ck->family);
		t.nat_port = f->nat_port;
	} else if (svc->mode == MODE_DSR && !table_lookup(svc, ck, &slot, &t.id)) {
		t.b = backend_get(t.id, ck->family);
	}
	if (!t.b)
		return VERDICT_PASS;
	pl->svc_id = svc->id;
	__builtin_memcpy(pl->nexthop, t.b->addr, sizeof(pl->nexthop));
	if (svc->mode == MODE_DSR)
		return VERDICT_FORWARD;
	if (svc->mode == MODE_FULLNAT && (!t.nat_port || !(g = fullnat_settings(svc, ck->family))))
		return VERDICT_PASS;
	pl->nat = 1;
	__builtin_memcpy(pl->out.dst, t.b->addr, sizeof(pl->out.dst));
	__builtin_memcpy(qout->src, t.b->addr, sizeof(qout->src));
	qout->sport = backend_port(t.b, ck->dport);
	if (g) {
		addr_copy(pl->out.src, snat_addr(g, ck->family), ck->family);
		if (f && (f->flags & FLOW_FOREIGN_SOURCE))
			foreign_source(ck, pl->out.src);
		addr_copy(qout->dst, pl->out.src, ck->family);
		qout->dport = t.nat_port;
	}
	return VERDICT_FORWARD;
}

/* Plans an ICMP error quoting 5-tuple q: pl->out gets the outer addresses, qout the quoted
 * 5-tuple to write. An error goes to the quoted packet's source; others pass. A subprogram: a
 * stack frame of its own. */
static __noinline int icmp_decide(const struct packet *p, const struct flow_key *q, struct plan *pl,
				  struct flow_key *qout)
{
	struct flow_key rq;
	struct reverse *r;
	struct service *svc;

	if (p->ttl <= 1 || !addr_eq(p->key.dst, q->src))
		return VERDICT_PASS;
	pl->out = p->key;
	pl->nat = 0;
	pl->counted = 0; /* errors count in no stats; where they cannot be forwarded, they do */
	pl->svc_id = NO_SERVICE;
	*qout = *q;
	flow_reverse(&rq, q);
	r = bpf_map_lookup_elem(&replies, &rq);
	if (r)
		return icmp_to_client(p, q, r, pl, qout);
	svc = service_lookup(q->src, q->sport, q->proto, q->family);
	return svc ? icmp_to_backend(svc, &rq, pl, qout) : VERDICT_PASS;
}

/* The ICMP path's working set, kept in a per-CPU map rather than on the BPF stack. */
struct icmp_work {
	union {
		struct icmp4_frame v4;
		struct icmp6_frame v6;
	} fr;
	struct flow_key       q;    /* the quoted 5-tuple */
	struct flow_key       qout; /* the quoted 5-tuple to write */
	struct bpf_fib_lookup fib;
	__sum16               tcp_check; /* the quoted TCP checksum, when has_tcp_check */
	__u8                  has_tcp_check;
};

/* Per-CPU working space of the ICMP error path (no state survives a packet; not pinned). Its
 * value is sized rather than typed: the Go bindings need no type for it. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct icmp_work));
	__uint(max_entries, 1);
} icmp_scratch SEC(".maps");

/* Rewrites the quoted UDP checksum, or the quoted TCP one when quoted, by diff; returns the
 * difference made to the ICMP message. */
static __always_inline __u32 quoted_l4_rewrite(struct icmp_work *w, __sum16 *udp_check, __u32 diff)
{
	__sum16 old;

	if (w->q.proto == IPPROTO_UDP) {
		old = *udp_check;
		*udp_check = csum_apply_udp(old, diff);
		return csum_diff16(old, *udp_check);
	}
	if (!w->has_tcp_check)
		return 0;
	old = w->tcp_check;
	w->tcp_check = csum_apply(old, diff);
	return csum_diff16(old, w->tcp_check);
}

/* Rewrites an IPv4 error's headers and checksums. */
static __always_inline void icmp4_rewrite(struct icmp4_frame *fr, const struct packet *p,
					  const struct plan *pl, struct icmp_work *w, bool routed)
{
	struct csum_diffs d;
	__u32             qa = addrs_diff(&w->q, &w->qout), qp = ports_diff(&w->q, &w->qout);
	__u32             msg = csum_add(qa, qp);
	__sum16           old = fr->inner.check;

	diffs_of(p, pl, routed, &d);
	ipv4_rewrite(&fr->outer, pl, &d, routed);
	__builtin_memcpy(&fr->inner.saddr, w->qout.src, 4);
	__builtin_memcpy(&fr->inner.daddr, w->qout.dst, 4);
	fr->inner.check = csum_apply(old, qa);
	msg = csum_add(msg, csum_diff16(old, fr->inner.check));
	fr->sport = w->qout.sport;
	fr->dport = w->qout.dport;
	msg = csum_add(msg, quoted_l4_rewrite(w, &fr->w3, csum_add(qa, qp)));
	fr->icmp.checksum = csum_apply(fr->icmp.checksum, msg);
}

/* Rewrites an ICMPv6 error's headers and checksum (which also covers the outer addresses). */
static __always_inline void icmp6_rewrite(struct icmp6_frame *fr, const struct packet *p,
					  const struct plan *pl, struct icmp_work *w, bool routed)
{
	struct csum_diffs d;
	__u32             qa = addrs_diff(&w->q, &w->qout), qp = ports_diff(&w->q, &w->qout);
	__u32             msg = csum_add(qa, qp);

	diffs_of(p, pl, routed, &d);
	ipv6_rewrite(&fr->outer, pl, routed);
	msg = csum_add(msg, d.addrs);
	__builtin_memcpy(&fr->inner.saddr, w->qout.src, 16);
	__builtin_memcpy(&fr->inner.daddr, w->qout.dst, 16);
	fr->sport = w->qout.sport;
	fr->dport = w->qout.dport;
	msg = csum_add(msg, quoted_l4_rewrite(w, &fr->w3, csum_add(qa, qp)));
	fr->icmp.checksum = csum_apply(fr->icmp.checksum, msg);
}

/* Loads an IPv4 error's headers; -1 unless it quotes the first bytes of a TCP/UDP packet. */
static __always_inline int icmp4_load(void *ctx, bool xdp, const struct packet *p,
				      struct icmp_work *w)
{
	struct icmp4_frame *fr = &w->fr.v4;

	if (p->l4_off != ETH_HLEN + sizeof(struct iphdr) || p->l3_len < sizeof(*fr) ||
	    ctx_load(ctx, xdp, ETH_HLEN, fr, sizeof(*fr)))
		return -1;
	if (fr->inner.version != 4 || fr->inner.ihl != 5 ||
	    fr->inner.frag_off & bpf_htons(IP_OFFSET) ||
	    (fr->inner.protocol != IPPROTO_TCP && fr->inner.protocol != IPPROTO_UDP))
		return -1;
	__builtin_memset(&w->q, 0, sizeof(w->q));
	w->q.family = AF_INET;
	w->q.proto = fr->inner.protocol;
	__builtin_memcpy(w->q.src, &fr->inner.saddr, 4);
	__builtin_memcpy(w->q.dst, &fr->inner.daddr, 4);
	w->q.sport = fr->sport;
	w->q.dport = fr->dport;
	return 0;
}

/* Loads an ICMPv6 error's headers; -1 unless it quotes the first bytes of a TCP/UDP packet. */
static __always_inline int icmp6_load(void *ctx, bool xdp, const struct packet *p,
				      struct icmp_work *w)
{
	struct icmp6_frame *fr = &w->fr.v6;

	if (p->l3_len < sizeof(*fr) || ctx_load(ctx, xdp, ETH_HLEN, fr, sizeof(*fr)))
		return -1;
	if (fr->inner.version != 6 ||
	    (fr->inner.nexthdr != IPPROTO_TCP && fr->inner.nexthdr != IPPROTO_UDP))
		return -1;
	__builtin_memset(&w->q, 0, sizeof(w->q));
	w->q.family = AF_INET6;
	w->q.proto = fr->inner.nexthdr;
	__builtin_memcpy(w->q.src, &fr->inner.saddr, 16);
	__builtin_memcpy(w->q.dst, &fr->inner.daddr, 16);
	w->q.sport = fr->sport;
	w->q.dport = fr->dport;
	return 0;
}

/* Offset of the checksum of a quoted TCP header after a frame of frame_len bytes. */
static __always_inline __u32 quoted_tcp_check_off(__u32 frame_len)
{
	return ETH_HLEN + frame_len - L4_MIN_LEN + QUOTED_TCP_CHECK;
}

/* Loads the quoted TCP checksum when the error quotes that much of the packet. */
static __always_inline void quoted_tcp_check_load(void *ctx, bool xdp, const struct packet *p,
						  struct icmp_work *w, __u32 frame_len)
{
	__u32 off = quoted_tcp_check_off(frame_len);

	w->has_tcp_check = w->q.proto == IPPROTO_TCP &&
			   ETH_HLEN + p->l3_len >= off + sizeof(w->tcp_check) &&
			   !ctx_load(ctx, xdp, off, &w->tcp_check, sizeof(w->tcp_check));
}

/* Writes a rewritten error back and sends it on. */
static __always_inline int icmp_send(void *ctx, bool xdp, struct icmp_work *w, __u32 frame_len,
				     int egress)
{
	if (ctx_store(ctx, xdp, ETH_HLEN, &w->fr, frame_len))
		return verdict_drop(xdp);
	if (w->has_tcp_check && ctx_store(ctx, xdp, quoted_tcp_check_off(frame_len), &w->tcp_check,
					  sizeof(w->tcp_check)))
		return verdict_drop(xdp);
	if (egress == EGRESS_REDIRECT && ctx_store_macs(ctx, xdp, &w->fib))
		return verdict_drop(xdp);
	return leave(xdp, egress, &w->fib);
}

/* Handles an ICMP or ICMPv6 packet received on ifindex: errors about tracked flows are
 * translated and forwarded, everything else passes. pl is the caller's room for the plan. */
static __always_inline int icmp_handle(void *ctx, bool xdp, const struct packet *p, struct plan *pl,
				       __u32 ifindex)
{
	bool              v4 = p->key.family == AF_INET;
	__u32             frame_len = v4 ? sizeof(struct icmp4_frame) : sizeof(struct icmp6_frame);
	struct icmp_work *w;
	__u32             zero = 0;
	int               egress;
	__u8              why;

	if (!icmp_is_error(p) || !(w = bpf_map_lookup_elem(&icmp_scratch, &zero)))
		return verdict_pass(xdp);
	if (v4 ? icmp4_load(ctx, xdp, p, w) : icmp6_load(ctx, xdp, p, w))
		return verdict_pass(xdp);
	if (icmp_decide(p, &w->q, pl, &w->qout) != VERDICT_FORWARD)
		return verdict_pass(xdp);
	egress = route(ctx, xdp, p, pl, ifindex, &w->fib, &why);
	if (egress == EGRESS_DROP) {
		count_outcome(pl, 0, false, why);
		return verdict_drop(xdp);
	}
	if (egress == EGRESS_STACK && !pl->nat)
		return verdict_pass(xdp);
	quoted_tcp_check_load(ctx, xdp, p, w, frame_len);
	if (v4)
		icmp4_rewrite(&w->fr.v4, p, pl, w, egress != EGRESS_STACK);
	else
		icmp6_rewrite(&w->fr.v6, p, pl, w, egress != EGRESS_STACK);
	return icmp_send(ctx, xdp, w, frame_len, egress);
}

#endif
