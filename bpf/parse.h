/* Sluice eBPF datapath: Ethernet, IPv4/IPv6 and TCP/UDP/ICMP parsing with strict bounds and length
 * checks. Anything the parser rejects is passed to the stack untouched: other ethertypes (VLAN
 * tags included), IP fragments (so fragmented VIP traffic is left to the stack), IPv6 extension
 * headers, other L4 protocols, and headers that are truncated or disagree with the frame length. */
#ifndef SLUICE_PARSE_H
#define SLUICE_PARSE_H

#include <stdbool.h>
#include <linux/types.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "structs.h"

#ifndef AF_INET
#define AF_INET  2
#define AF_INET6 10
#endif

#define ICMP_DEST_UNREACH   3 /* linux/icmp.h would pull in libc headers */
#define ICMP_TIME_EXCEEDED  11
#define ICMPV6_DEST_UNREACH 1
#define ICMPV6_PKT_TOOBIG   2
#define ICMPV6_TIME_EXCEED  3

#define IP_DF      0x4000 /* do not fragment */
#define IP_MF      0x2000 /* more fragments */
#define IP_OFFSET  0x1fff /* fragment offset mask */
#define TCP_FIN    0x01   /* in the TCP flags byte */
#define TCP_SYN    0x02
#define TCP_RST    0x04
#define TCP_ACK    0x10
#define L4_MIN_LEN 8 /* the bytes of an L4 header every parsed protocol has */

/* An ICMP or ICMPv6 header. */
struct icmp_hdr {
	__u8    type;
	__u8    code;
	__sum16 checksum;
	__be32  rest; /* depends on the type (the MTU of fragmentation needed / packet too big) */
};

/* What the parser learnt about a frame. */
struct packet {
	struct flow_key key;       /* the 5-tuple on the wire; ports are 0 for ICMP */
	__u32           l4_off;    /* offset of the L4 header from the start of the frame */
	__u32           l3_len;    /* IPv4 total length, or IPv6 header + payload length */
	__u8            ttl;       /* TTL or hop limit */
	__u8            tcp_flags; /* TCP flags byte */
	__u8            icmp_type; /* ICMP or ICMPv6 type */
	__u8            tos;       /* DSCP and ECN: the TOS byte or the traffic class */
	__u8            df;        /* IPv4 with DF set */
	__u8            pad[3];
};

/* Parses the ports (TCP, UDP) or type (ICMP) of an L4 header of l4_len bytes at l4. */
static __always_inline int parse_l4(void *l4, void *data_end, __u32 l4_len, __u8 proto,
				    struct packet *p)
{
	if (l4 + L4_MIN_LEN > data_end || l4_len < L4_MIN_LEN)
		return -1;
	if (proto == IPPROTO_UDP) {
		struct udphdr *udp = l4;
		__u16          ulen = bpf_ntohs(udp->len);

		/* A length under the header's or beyond the IP payload disagrees with the frame:
		 * the stack judges it. (UDP over IPv6 jumbograms, length 0, are not balanced.) */
		if (ulen < sizeof(*udp) || ulen > l4_len)
			return -1;
		p->key.sport = udp->source;
		p->key.dport = udp->dest;
		return 0;
	}
	if (proto == IPPROTO_TCP) {
		struct tcphdr *tcp = l4;

		if (l4 + sizeof(*tcp) > data_end || tcp->doff < 5 || tcp->doff * 4 > l4_len)
			return -1;
		p->key.sport = tcp->source;
		p->key.dport = tcp->dest;
		p->tcp_flags = ((__u8 *)tcp)[13];
		return 0;
	}
	if (proto == IPPROTO_ICMP || proto == IPPROTO_ICMPV6) {
		p->icmp_type = *(__u8 *)l4;
		return 0;
	}
	return -1;
}

/* Parses an IPv4 header (options included) and what follows it. */
static __always_inline int parse_ipv4(void *data, void *data_end, __u32 len, struct packet *p)
{
	struct iphdr *ip = data + ETH_HLEN;
	__u32         hlen, tot;

	if ((void *)(ip + 1) > data_end || ip->version != 4 || ip->ihl < 5)
		return -1;
	hlen = ip->ihl * 4;
	tot = bpf_ntohs(ip->tot_len);
	if (tot < hlen || ETH_HLEN + tot > len)
		return -1;
	if (ip->frag_off & bpf_htons(IP_MF | IP_OFFSET))
		return -1;
	p->key.family = AF_INET;
	p->key.proto = ip->protocol;
	__builtin_memcpy(p->key.src, &ip->saddr, 4);
	__builtin_memcpy(p->key.dst, &ip->daddr, 4);
	p->l4_off = ETH_HLEN + hlen;
	p->l3_len = tot;
	p->ttl = ip->ttl;
	p->tos = ip->tos;
	p->df = !!(ip->frag_off & bpf_htons(IP_DF));
	return parse_l4((void *)ip + hlen, data_end, tot - hlen, ip->protocol, p);
}

/* Parses an IPv6 header directly followed by TCP, UDP or ICMPv6. */
static __always_inline int parse_ipv6(void *data, void *data_end, __u32 len, struct packet *p)
{
	struct ipv6hdr *ip6 = data + ETH_HLEN;
	__u32           plen;

	if ((void *)(ip6 + 1) > data_end || ip6->version != 6)
		return -1;
	plen = bpf_ntohs(ip6->payload_len);
	if (ETH_HLEN + sizeof(*ip6) + plen > len)
		return -1;
	p->key.family = AF_INET6;
	p->key.proto = ip6->nexthdr;
	__builtin_memcpy(p->key.src, &ip6->saddr, 16);
	__builtin_memcpy(p->key.dst, &ip6->daddr, 16);
	p->l4_off = ETH_HLEN + sizeof(*ip6);
	p->l3_len = sizeof(*ip6) + plen;
	p->ttl = ip6->hop_limit;
	p->tos = ip6->priority << 4 | ip6->flow_lbl[0] >> 4;
	return parse_l4(ip6 + 1, data_end, plen, ip6->nexthdr, p);
}

/* Parses a frame of len bytes whose linear part is [data, data_end); 0 when it is TCP, UDP or
 * ICMP over IP and well formed. */
static __always_inline int parse(void *data, void *data_end, __u32 len, struct packet *p)
{
	struct ethhdr *eth = data;

	__builtin_memset(p, 0, sizeof(*p));
	if ((void *)(eth + 1) > data_end)
		return -1;
	if (eth->h_proto == bpf_htons(ETH_P_IP))
		return parse_ipv4(data, data_end, len, p);
	if (eth->h_proto == bpf_htons(ETH_P_IPV6))
		return parse_ipv6(data, data_end, len, p);
	return -1;
}

#endif
