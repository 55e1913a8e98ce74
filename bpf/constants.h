/* Sluice eBPF datapath: sizes and enumerations shared by the program and the Go loader. */
#ifndef SLUICE_CONSTANTS_H
#define SLUICE_CONSTANTS_H

#include <linux/types.h>

/* Default map sizes; the loader may resize before loading. */
#define MAX_VIPS       65536     /* (vip, port, proto) entries: a port range takes one per port */
#define MAX_SERVICES   16384     /* service ids 0..MAX_SERVICES-1 */
#define MAX_BACKENDS   131072    /* backend ids 0..MAX_BACKENDS-1 */
#define MAGLEV_SLOTS   (1 << 24) /* all services' Maglev tables, end to end */
#define MAX_FLOWS      (1 << 20) /* tracked flows (LRU) */
#define MAX_INTERFACES 4096      /* interfaces XDP runs on, with their MACs in if_macs */
#define MAX_PERSIST    (1 << 18) /* persistent clients (LRU); the loader sizes it max_flows/4 */
#define MAX_COUNTED    1024      /* backends an lc/wlc service compares for a new flow */
#define MAX_SOURCES    (1 << 20) /* source_allow or source_deny prefixes, all services */
#define MAX_CLIENTS    (1 << 18) /* clients tracked for per-source limits (LRU), all services */
#define FLOW_EVENTS    (1 << 22) /* bytes of flow_events: 58,254 events of 72 bytes */
#define PREV_SLOTS     (1 << 20) /* table slots remembered for second chance, all services */
#define FOREIGN_FLOWS  (1 << 18) /* fullnat flows of other nodes' sources (LRU) */

/* The enums have the width of the field that holds them (a clang extension) so that the fields
 * can be typed and bpf2go -type generates their Go constants. */

/* Forwarding modes (struct service.mode). */
enum mode : __u8 {
	MODE_NAT = 1,     /* rewrite the destination; replies are reverse-translated */
	MODE_FULLNAT = 2, /* the source too: the balancer's address and a port of its own */
	MODE_DSR = 3,     /* rewrite the destination MAC only; replies bypass the balancer */
	MODE_TUNNEL = 4,  /* dsr in an outer IP header to a routed backend (service_tunnels) */
};

/* struct tunnel.kind */
enum tunnel_kind : __u8 {
	TUNNEL_IPIP = 1, /* IPv4 in IPv4 (protocol 4), IPv6 in IPv6 (next header 41) */
	TUNNEL_GUE = 2,  /* GUE variant 1: the IP packet directly after an outer UDP header */
};

/* What to do with a new flow when the service has no backend (struct service.fallback). */
enum fallback : __u8 {
	FALLBACK_DROP = 0,
	FALLBACK_REJECT = 1, /* TCP RST / ICMP unreachable: left to the stack, the packet passes */
};

/* struct service.flags */
enum service_flags : __u8 {
	SERVICE_RETIRED = 1,      /* left the config: its established flows are still forwarded,
	                           * anything else passes to the stack */
	SERVICE_HASH_SOURCE = 2,  /* sh: the table is indexed by a hash of the source address */
	SERVICE_HASH_SPORT = 4,   /* sh_port: and of the source port */
	SERVICE_OPTS = 8,         /* service_opts holds settings for new flows: persistence,
	                           * access lists */
	SERVICE_LEAST_CONN = 16,  /* lc/wlc: the ring lists the backends to compare, once each */
	SERVICE_WEIGHTED = 32,    /* wlc: connections are compared relative to weights */
	SERVICE_COUNT_CONNS = 64, /* the backends' active flows are counted (backend_conns) */
	SERVICE_LIMITS = 128,     /* the service's and its clients' flows are limited and counted
	                           * (service_opts, service_conns, client_conns) */
};

/* struct service_settings.sources: the access lists a service has. */
enum source_lists : __u8 {
	SOURCES_ALLOW = 1, /* only clients in source_allow may open new flows */
	SOURCES_DENY = 2,  /* clients in source_deny may not */
};

/* struct service.source: where a fullnat service's flows take their source address from. */
enum service_source : __u8 {
	SOURCE_NODE = 0, /* config: the node's address towards the backends */
	SOURCE_OWN = 1,  /* service_sources: the service's own (fullnat_source) */
};

/* Why a service refused a new flow (its counter in struct refusals). */
enum refusal : __u8 {
	REFUSAL_NONE = 0,
	REFUSAL_SOURCE = 1,       /* source_allow / source_deny */
	REFUSAL_CLIENT_CONNS = 2, /* limits.connections_per_source */
	REFUSAL_CONNS = 3,        /* limits.connections */
	REFUSAL_CLIENT_RATE = 4,  /* limits.new_connections_per_source_per_second */
	REFUSAL_RATE = 5,         /* limits.new_connections_per_second */
};

/* Why the program could not forward a planned packet (its counter in struct unforwarded): it
 * drops the packet, which counts in no struct stats. */
enum unforwarded_reason : __u8 {
	UNFORWARDED_NONE = 0,
	UNFORWARDED_FWD_DISABLED =
		1,                /* the receiving interface does not forward (net.ipv4.ip_forward,
	                               * net.ipv6.conf.all.forwarding or the interface's own) */
	UNFORWARDED_NO_ROUTE = 2, /* no route to the next hop, or a blackhole, unreachable or
	                               * prohibit one, or a local one */
	UNFORWARDED_NO_NEIGH = 3, /* XDP dsr: the next hop's neighbour is not resolved */
};

/* The service id of a plan counted under no service. */
#define NO_SERVICE 0xffffffff

/* struct service_settings.limit_action */
enum limit_action : __u8 {
	LIMIT_DROP = 0,
	LIMIT_RESET = 1, /* a TCP RST, left to the stack like fallback reject: the packet passes */
};

/* struct backend.flags */
enum backend_flags : __u8 {
	BACKEND_VALID = 1,     /* the id is in use; flows pinned to an invalid id pick again */
	BACKEND_TAKES_NEW = 2, /* it may take new flows (weight > 0): persistence may pick it */
};

/* struct flow.flags */
enum flow_flags : __u16 {
	FLOW_CLOSING = 1, /* the client sent a TCP FIN or RST: no longer counted as active */
	/* a fullnat flow another node made, translated to that node's source (flow_sources) */
	FLOW_FOREIGN_SOURCE = 2,
};

#endif
