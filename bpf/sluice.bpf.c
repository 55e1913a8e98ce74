// SPDX-License-Identifier: GPL-2.0
/* Sluice eBPF datapath: a Layer-4 balancer on tc (sluice_tc, the default, attached with tcx
 * ingress) or XDP (sluice_xdp), sharing one core:
 *
 *   constants.h, structs.h, maps.h   the contract with the Go loader
 *   parse.h    Ethernet/IPv4/IPv6/TCP/UDP/ICMP parsing; what it rejects passes untouched
 *   csum.h     one's-complement checksum arithmetic
 *   hash.h     the flow hash
 *   flow.h     services, Maglev selection, the flow table, reply entries, counters
 *   lb.h       the decision for a TCP/UDP packet: balance, translate a reply, or pass
 *   forward.h  route lookup and redirect
 *   nat.h      the TCP/UDP rewrites and their checksums (tc helpers, XDP in place)
 *   icmp.h     ICMP errors about tracked flows
 *   tunnel.h   mode tunnel: IPIP/GUE encapsulation, ICMP too big for what no longer fits
 *
 * Packets that are not for a VIP and are not replies of a tracked nat/fullnat flow pass to the
 * stack untouched, so the program can sit on every interface of the balancer.
 *
 * The entry points parse into their own stack frame and call subprograms for the decision and
 * for the rewrite, each with a frame of its own: inlined into one function they would not fit
 * the 512-byte BPF stack. */
#include <linux/if_packet.h>
#include "icmp.h"
#include "nat.h"
#include "tunnel.h"

#define PULL_LEN (ETH_HLEN + 60 + sizeof(struct tcphdr)) /* headers the parser reads directly */

/* forward() for tc. */
static __noinline int forward_tc(struct __sk_buff *skb, const struct packet *p,
				 const struct plan *pl)
{
	return forward(skb, false, p, pl, skb->ingress_ifindex);
}

/* forward() for XDP. */
static __noinline int forward_xdp(struct xdp_md *ctx, const struct packet *p, const struct plan *pl)
{
	return forward(ctx, true, p, pl, ctx->ingress_ifindex);
}

/* tunnel_forward() for tc. */
static __noinline int tunnel_tc(struct __sk_buff *skb, const struct packet *p,
				const struct plan *pl)
{
	return tunnel_forward(skb, false, p, pl, skb->ingress_ifindex);
}

/* tunnel_forward() for XDP. */
static __noinline int tunnel_xdp(struct xdp_md *ctx, const struct packet *p, const struct plan *pl)
{
	return tunnel_forward(ctx, true, p, pl, ctx->ingress_ifindex);
}

/* icmp_handle() for tc. */
static __noinline int icmp_tc(struct __sk_buff *skb, const struct packet *p, struct plan *pl)
{
	return icmp_handle(skb, false, p, pl, skb->ingress_ifindex);
}

/* icmp_handle() for XDP. */
static __noinline int icmp_xdp(struct xdp_md *ctx, const struct packet *p, struct plan *pl)
{
	return icmp_handle(ctx, true, p, pl, ctx->ingress_ifindex);
}

/* Parses an skb. The parser reads the headers directly, so a frame whose headers are not all in
 * the linear part is parsed again after bpf_skb_pull_data moves them there. That pull is only
 * tried when the first parse fails: it makes the skb writable, which unclones the clones local
 * TCP senders transmit (their linear part holds exactly the headers, the payload being in
 * fragments), so pulling every non-linear frame would copy most data packets. */
static __always_inline int tc_parse(struct __sk_buff *skb, struct packet *p)
{
	__u32 want = skb->len < PULL_LEN ? skb->len : PULL_LEN;

	if (!parse((void *)(long)skb->data, (void *)(long)skb->data_end, skb->len, p))
		return 0;
	if ((void *)(long)skb->data + want <= (void *)(long)skb->data_end)
		return -1;
	if (bpf_skb_pull_data(skb, want))
		return -1;
	return parse((void *)(long)skb->data, (void *)(long)skb->data_end, skb->len, p);
}

/* True for a frame to another host's MAC: a unicast destination (I/G bit clear) that is not the MAC
 * the loader recorded for the ingress interface. That is what eth_type_trans marks
 * PACKET_OTHERHOST for tc; an interface with no entry (not attached by the loader) has none. */
static __always_inline bool xdp_for_another_host(struct xdp_md *ctx)
{
	void          *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u32          ifindex = ctx->ingress_ifindex;
	struct if_mac *own;

	if ((void *)(eth + 1) > data_end || eth->h_dest[0] & 1)
		return false;
	own = bpf_map_lookup_elem(&if_macs, &ifindex);
	return own && (*(__u32 *)eth->h_dest != *(__u32 *)own->addr ||
		       *(__u16 *)(eth->h_dest + 4) != *(__u16 *)(own->addr + 4));
}

/* True for a parsed ICMP or ICMPv6 packet. */
static __always_inline bool is_icmp(const struct packet *p)
{
	return p->key.proto == IPPROTO_ICMP || p->key.proto == IPPROTO_ICMPV6;
}

SEC("tc")
int sluice_tc(struct __sk_buff *skb)
{
	struct packet p;
	struct plan   pl;
	int           verdict;

	/* A frame for another host's MAC (a switch flooding unknown unicast, as it does once the
	 * node that held the MAC is gone) is the stack's to drop: balancing it would duplicate
	 * another balancer's packets. */
	if (skb->pkt_type == PACKET_OTHERHOST)
		return TC_ACT_OK;
	if (tc_parse(skb, &p))
		return TC_ACT_OK;
	if (is_icmp(&p))
		return icmp_tc(skb, &p, &pl);
	verdict = lb_decide(&p, &pl);
	if (verdict == VERDICT_FORWARD)
		return pl.tunnel ? tunnel_tc(skb, &p, &pl) : forward_tc(skb, &p, &pl);
	return verdict == VERDICT_DROP ? TC_ACT_SHOT : TC_ACT_OK;
}

SEC("xdp")
int sluice_xdp(struct xdp_md *ctx)
{
	void         *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
	struct packet p;
	struct plan   pl;
	int           verdict;

	/* The stack drops a frame for another host's MAC, as sluice_tc leaves it to. */
	if (xdp_for_another_host(ctx))
		return XDP_PASS;
	if (parse(data, data_end, data_end - data, &p))
		return XDP_PASS;
	if (is_icmp(&p))
		return icmp_xdp(ctx, &p, &pl);
	verdict = lb_decide(&p, &pl);
	if (verdict == VERDICT_FORWARD)
		return pl.tunnel ? tunnel_xdp(ctx, &p, &pl) : forward_xdp(ctx, &p, &pl);
	return verdict == VERDICT_DROP ? XDP_DROP : XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
