/* Sluice eBPF datapath: map keys and values. Addresses are 16 bytes; IPv4 uses the first 4
 * bytes and zeroes the rest. Ports are in network byte order. */
#ifndef SLUICE_STRUCTS_H
#define SLUICE_STRUCTS_H

#include <linux/types.h>
#include "constants.h"

/* A virtual service address: one per VIP, port and protocol. */
struct vip_key {
	__u8   addr[16];
	__be16 port;
	__u8   proto;  /* IPPROTO_TCP or IPPROTO_UDP */
	__u8   family; /* AF_INET or AF_INET6 */
};

/* A service: how to pick a backend for a new flow and how to forward. */
struct service {
	__u32               id;          /* index into service_stats */
	__u32               ring_offset; /* first slot of the service's Maglev table in maglev */
	__u32               ring_size;   /* slots; 0 = no backend can take new flows (fallback) */
	enum mode           mode;
	enum fallback       fallback;
	enum service_flags  flags;
	/* fullnat: SOURCE_OWN when service_sources holds the service's own source address; a pad
	 * byte before it, which earlier versions wrote 0 (SOURCE_NODE) in pinned vips entries */
	enum service_source source;
};

/* A mode tunnel service's encapsulation (service_tunnels, by service id). */
struct tunnel {
	enum tunnel_kind kind;
	__u8             pad;
	__be16           gue_port; /* GUE: the destination port */
	__u8             src[16];  /* outer source; zero: the route's preferred source */
};

/* A tunnel service's packets by fate (tunnel_stats, per CPU, by service id). */
struct tunnel_counts {
	__u64 encapsulated; /* sent on, encapsulated */
	__u64 too_big;      /* too big once encapsulated: answered with ICMP too big, dropped */
	__u64 no_source;    /* no outer source address for the backend's route: dropped */
};

/* A backend, indexed by its id. */
struct backend {
	__u8               addr[16];
	__be16             port; /* 0 = the port the client used */
	__u8               family;
	enum backend_flags flags;
};

/* A flow's 5-tuple as seen on the wire. Aligned to 4 (no layout change) so that the program can
 * hash and checksum it a word at a time. */
struct flow_key {
	__u8   src[16];
	__u8   dst[16];
	__be16 sport;
	__be16 dport;
	__u8   proto;
	__u8   family;
	__u16  pad;
} __attribute__((aligned(4)));

/* A tracked client flow: the backend it was given, and for fullnat the source port used. */
struct flow {
	__u32           backend_id;
	__u32           service_id;
	__be16          nat_port; /* fullnat: the balancer-side source port */
	enum flow_flags flags;
	__u32           pad2;
	/* CLOCK_MONOTONIC ns of the last packet (bpf_ktime_get_coarse_ns(): tick granularity),
	 * refreshed at most once a second */
	__u64           last_seen;
};

/* The client side of a translated flow, keyed by the backend-side 5-tuple of its replies. */
struct reverse {
	__u8   vip[16];
	__u8   client[16];
	__be16 vport;
	__be16 cport;
	__u32  service_id;
	__u32  backend_id;
	__u32  pad;
};

/* A service's settings beyond struct service (which pinned maps fix in size), by service id. */
struct service_settings {
	__u64             persist_ns; /* persistence timeout; 0: off */
	/* new flows at most one per rate_ns on average (GCRA, a second's burst); 0: no limit */
	__u64             rate_ns;
	__u64             client_rate_ns;   /* the same for one client address */
	__u32             max_conns;        /* active flows of the service; 0: no limit */
	__u32             max_client_conns; /* active flows of one client address; 0: no limit */
	__u8              persist_prefix;   /* prefix length the client address is masked to */
	enum source_lists sources;
	enum limit_action limit_action;
	__u8              pad[5];
};

/* A client of a service, for per-source limits. */
struct client_key {
	__u8  addr[16];
	__u32 service_id;
	__u32 pad;
};

/* A client's rate and active flows: opened and closed by the program, lost (ended unseen) by
 * the loader's recount, as for backends. */
struct client_state {
	__u64 tat; /* GCRA's theoretical arrival time of the client's next new flow */
	__u64 opened;
	__u64 closed;
	__u64 lost;
};

/* A client prefix of a service's access list (an LPM trie key: prefixlen counts the service id's
 * 32 bits and the address's). */
struct source_key {
	__u32 prefixlen;
	__u32 service_id;
	__u8  addr[16];
};

/* A backend's settings for counting schedulers and thresholds, by backend id. */
struct backend_settings {
	__u32 weight;    /* wlc's weight */
	__u32 max_conns; /* upper threshold (0: none) */
	__u32 min_conns; /* lower threshold: an overloaded backend takes flows again at this many */
	__u32 pad;
};

/* A backend's connection counts, by backend id, written by the program only. Its active flows
 * are opened - closed - backend_lost[id] (the flows that ended unseen, counted by the loader). */
struct conn_counts {
	__u64 opened;     /* flows created */
	__u64 closed;     /* flows whose client sent FIN or RST, or that were rebalanced */
	__u32 overloaded; /* reached max_conns, not yet down to min_conns */
	__u32 pad;
};

/* A persistent client: the service and the client's masked address. */
struct persist_key {
	__u8  addr[16];
	__u32 service_id;
	__u8  family;
	__u8  pad[3];
};

/* A persistent client's backend and the time of its last new flow. */
struct persist_entry {
	__u32 backend_id;
	__u32 pad;
	__u64 last_new; /* CLOCK_MONOTONIC ns (coarse) */
};

/* New flows a service refused, by enum refusal (per CPU). */
struct refusals {
	__u64 source;
	__u64 client_conns;
	__u64 conns;
	__u64 client_rate;
	__u64 rate;
};

/* Packets of a service the program could not forward, by enum unforwarded_reason (per CPU). */
struct unforwarded {
	__u64 fwd_disabled;
	__u64 no_route;
	__u64 no_neigh;
};

/* Packet, byte and new-flow counters (per CPU). */
struct stats {
	__u64 packets;
	__u64 bytes;
	__u64 flows;
};

/* An interface's MAC address. */
struct if_mac {
	__u8  addr[6];
	__u16 pad;
};

/* Global settings written by the loader; also a fullnat service's own source and port range in
 * service_sources (flow_events unused there). */
struct globals {
	__u8  snat4[4];  /* fullnat source address towards IPv4 backends */
	__u8  snat6[16]; /* fullnat source address towards IPv6 backends */
	__u16 port_low;  /* fullnat source port range, host byte order */
	__u16 port_high;
	__u8  flow_events; /* a replicator reads flow_events: new and closing flows go there */
	__u8  pad[3];
};

/* A flow the program created or saw closing, for a replicator (flow_events). The loader reads it
 * as the generated flow_key and flow types, end to end. */
struct flow_event {
	struct flow_key key;
	struct flow     flow;
};
_Static_assert(sizeof(struct flow_event) == 64, "flow_event is flow_key then flow, unpadded");

/* The backend a table slot had before its service's table last changed, for the mid-flow packets
 * without a flow that arrive until until_ns (second chance: their flow likely began on that
 * backend, on a node that did not hand it over). */
struct prev_slot {
	__u32 backend_id;
	__u32 service_id; /* the service whose table the slot was in */
	__u64 until_ns;   /* CLOCK_MONOTONIC: the change plus the service's flow_timeout */
};

/* The source address a fullnat flow another node made is translated to (that node's). */
struct flow_source {
	__u8 addr[16];
};

#endif
