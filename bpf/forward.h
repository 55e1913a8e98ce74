/* Sluice eBPF datapath: routing a rewritten packet with bpf_fib_lookup and sending it on with
 * bpf_redirect_neigh (tc) or bpf_redirect (XDP).
 *
 * How a packet leaves after the route lookup:
 *   routed (tc)        out of the route's device by bpf_redirect_neigh to the route's next hop:
 *                      the lookup skips the neighbour (BPF_FIB_LOOKUP_SKIP_NEIGH) and the program
 *                      never writes the MACs; the neighbour layer writes the L2 header (resolving
 *                      the next hop first when needed) as for any routed packet. nat/fullnat
 *                      packets have their TTL/hop limit decremented; dsr packets are not written
 *                      at all (as IPVS-DR does, the TTL is left alone: a dsr frame leaves exactly
 *                      as it came, bar its L2 header);
 *   routed (XDP)       new MACs from the lookup, TTL/hop limit decremented, bpf_redirect;
 *   no neighbour (XDP) XDP cannot resolve neighbours: nat/fullnat packets go to the stack with
 *                      their addresses rewritten (it forwards them and resolves the neighbour, so
 *                      the flow's next packets are redirected); dsr packets are dropped, as the
 *                      stack would route them by the VIP (or answer them itself, holding it), so
 *                      dsr on XDP needs the backends' neighbours resolved by other traffic (the
 *                      health checks) and the client retransmits meanwhile;
 *   forwarding off     (the receiving interface's net.ipv4/ipv6 forwarding) dropped: the stack
 *                      would drop it too;
 *   no route           (none, or a blackhole, unreachable, prohibit or local one) dropped;
 *   any other failure  to the stack with the addresses rewritten and the TTL untouched (it routes,
 *                      decrements and answers errors itself); a dsr packet is passed untouched.
 *                      This includes "fragmentation needed": the stack's ICMP error then quotes
 *                      the rewritten packet, which the client cannot match, so as with IPVS the
 *                      backends' side needs an MTU no smaller than the clients'.
 * A dropped packet counts in service_unforwarded by reason, and a client's packet counts in the
 * stats only once handed on (redirected, or to the stack to forward). */
#ifndef SLUICE_FORWARD_H
#define SLUICE_FORWARD_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include "lb.h"

/* How a planned packet leaves. */
enum egress {
	EGRESS_REDIRECT, /* out of fib.ifindex with fib's MACs (XDP) */
	EGRESS_NEIGH,    /* out of fib.ifindex to fib's next hop, MACs by bpf_redirect_neigh (tc) */
	EGRESS_STACK,    /* passed to the stack (rewritten if nat) */
	EGRESS_DROP,
};

/* The verdict that passes a packet to the stack. */
static __always_inline int verdict_pass(bool xdp)
{
	return xdp ? XDP_PASS : TC_ACT_OK;
}

/* The verdict that drops a packet. */
static __always_inline int verdict_drop(bool xdp)
{
	return xdp ? XDP_DROP : TC_ACT_SHOT;
}

/* How a packet leaves after a route lookup that returned rc, and why not when it is dropped. nat:
 * the packet's addresses change (the stack may forward it, routing by the new ones). */
static __always_inline int egress_of(long rc, bool xdp, bool nat, __u8 *why)
{
	*why = UNFORWARDED_NONE;
	switch (rc) {
	case BPF_FIB_LKUP_RET_SUCCESS:
		return xdp ? EGRESS_REDIRECT : EGRESS_NEIGH;
	case BPF_FIB_LKUP_RET_NO_NEIGH:
		if (!xdp)
			return EGRESS_NEIGH;
		if (nat)
			return EGRESS_STACK;
		*why = UNFORWARDED_NO_NEIGH;
		return EGRESS_DROP;
	case BPF_FIB_LKUP_RET_FWD_DISABLED:
		*why = UNFORWARDED_FWD_DISABLED;
		return EGRESS_DROP;
	case BPF_FIB_LKUP_RET_BLACKHOLE:
	case BPF_FIB_LKUP_RET_UNREACHABLE:
	case BPF_FIB_LKUP_RET_PROHIBIT:
	case BPF_FIB_LKUP_RET_NOT_FWDED:
		*why = UNFORWARDED_NO_ROUTE;
		return EGRESS_DROP;
	}
	return EGRESS_STACK;
}

/* Looks up the route of a planned packet arriving on ifindex, and says how it leaves, and why
 * not when it is dropped. XDP checks the MTU against the IP length; tc leaves tot_len 0 so that
 * the helper checks the skb, GSO aware, and skips the neighbour lookup that bpf_redirect_neigh
 * does anyway. */
static __always_inline int route(void *ctx, bool xdp, const struct packet *p, const struct plan *pl,
				 __u32 ifindex, struct bpf_fib_lookup *fib, __u8 *why)
{
	__builtin_memset(fib, 0, sizeof(*fib));
	fib->family = p->key.family;
	fib->l4_protocol = p->key.proto;
	fib->sport = pl->out.sport;
	fib->dport = pl->out.dport;
	fib->tot_len = xdp ? p->l3_len : 0;
	fib->ifindex = ifindex;
	if (p->key.family == AF_INET) {
		__builtin_memcpy(&fib->ipv4_src, pl->out.src, 4);
		__builtin_memcpy(&fib->ipv4_dst, pl->nexthop, 4);
	} else {
		__builtin_memcpy(fib->ipv6_src, pl->out.src, 16);
		__builtin_memcpy(fib->ipv6_dst, pl->nexthop, 16);
	}
	return egress_of(
		bpf_fib_lookup(ctx, fib, sizeof(*fib), xdp ? 0 : BPF_FIB_LOOKUP_SKIP_NEIGH), xdp,
		pl->nat, why);
}

/* Counts a planned packet by its fate: a client's packet to a backend in the stats once handed on
 * (sent), and a packet the program could not forward under its service by why. */
static __always_inline void count_outcome(const struct plan *pl, __u32 l3_len, bool sent, __u8 why)
{
	__u32               id = pl->svc_id;
	struct unforwarded *u;

	if (pl->counted)
		count_packet(id, pl->backend_id, l3_len, pl->new_flow, sent);
	if (why == UNFORWARDED_NONE || count_nothing ||
	    !(u = bpf_map_lookup_elem(&service_unforwarded, &id)))
		return;
	if (why == UNFORWARDED_FWD_DISABLED)
		u->fwd_disabled++;
	else if (why == UNFORWARDED_NO_ROUTE)
		u->no_route++;
	else
		u->no_neigh++;
}

/* Sends a rewritten packet on its way. */
static __always_inline int leave(bool xdp, int egress, const struct bpf_fib_lookup *fib)
{
	struct bpf_redir_neigh nh = {.nh_family = fib->family};

	if (egress == EGRESS_REDIRECT)
		return bpf_redirect(fib->ifindex, 0);
	if (egress == EGRESS_NEIGH && !xdp) {
		/* after the lookup, ipv4_dst/ipv6_dst hold the next hop */
		__builtin_memcpy(nh.ipv6_nh, fib->ipv6_dst, sizeof(nh.ipv6_nh));
		return bpf_redirect_neigh(fib->ifindex, &nh, sizeof(nh), 0);
	}
	if (egress == EGRESS_DROP)
		return verdict_drop(xdp);
	return verdict_pass(xdp);
}

#endif
