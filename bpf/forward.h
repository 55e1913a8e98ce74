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
 *   any other failure  to the stack with the addresses rewritten and the TTL untouched (it routes,
 *                      decrements and answers errors itself); a dsr packet is passed untouched.
 *                      This includes "fragmentation needed": the stack's ICMP error then quotes
 *                      the rewritten packet, which the client cannot match, so as with IPVS the
 *                      backends' side needs an MTU no smaller than the clients'. */
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

/* Looks up the route of a planned packet arriving on ifindex, and says how it leaves. XDP checks
 * the MTU against the IP length; tc leaves tot_len 0 so that the helper checks the skb, GSO
 * aware, and skips the neighbour lookup that bpf_redirect_neigh does anyway. */
static __always_inline int route(void *ctx, bool xdp, const struct packet *p, const struct plan *pl,
				 __u32 ifindex, struct bpf_fib_lookup *fib)
{
	long rc;

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
	rc = bpf_fib_lookup(ctx, fib, sizeof(*fib), xdp ? 0 : BPF_FIB_LOOKUP_SKIP_NEIGH);
	if (rc == BPF_FIB_LKUP_RET_SUCCESS)
		return xdp ? EGRESS_REDIRECT : EGRESS_NEIGH;
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH && !xdp)
		return EGRESS_NEIGH;
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH && !pl->nat)
		return EGRESS_DROP;
	return EGRESS_STACK;
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
