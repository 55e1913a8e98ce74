/* Sluice eBPF datapath: services, backend selection, the flow table, reply entries and counters. */
#ifndef SLUICE_FLOW_H
#define SLUICE_FLOW_H

#include "maps.h"
#include "hash.h"
#include "parse.h"
#include "sessions.h"

#define FLOW_REFRESH_NS 1000000000ULL         /* last_seen granularity; reply entries re-checked */
#define FULLNAT_TRIES   8                     /* source ports tried for a new fullnat flow */
#define FULLNAT_IDLE_NS (120 * 1000000000ULL) /* idle time after which a fullnat port is reused */

/* The backend serving a packet of a service's flow. */
struct target {
	struct backend *b;
	__u32           id;
	__be16          nat_port; /* fullnat: the balancer's source port */
	__u8            new_flow; /* the flow was (re)balanced by this packet */
	__u8            foreign;  /* fullnat: another node's source (FLOW_FOREIGN_SOURCE) */
};

/* The service of VIP addr:port/proto, or NULL. */
static __always_inline struct service *service_lookup(const __u8 *addr, __be16 port, __u8 proto,
						      __u8 family)
{
	struct vip_key k = {.port = port, .proto = proto, .family = family};

	__builtin_memcpy(k.addr, addr, sizeof(k.addr));
	return bpf_map_lookup_elem(&vips, &k);
}

/* True for the modes that send the client's packet unchanged, whose replies bypass the balancer:
 * no reply entry, no translation. */
static __always_inline bool mode_direct(enum mode m)
{
	return m == MODE_DSR || m == MODE_TUNNEL;
}

/* The port a backend takes a flow to VIP port dport on. */
static __always_inline __be16 backend_port(const struct backend *b, __be16 dport)
{
	return b->port ? b->port : dport;
}

/* True when two 16-byte addresses are equal. */
static __always_inline bool addr_eq(const __u8 *a, const __u8 *b)
{
	const __u32 *x = (const __u32 *)a, *y = (const __u32 *)b;

	return !((x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]) | (x[3] ^ y[3]));
}

/* Copies an address of a family (4 or 16 bytes). */
static __always_inline void addr_copy(__u8 *to, const __u8 *from, __u8 family)
{
	if (family == AF_INET)
		__builtin_memcpy(to, from, 4);
	else
		__builtin_memcpy(to, from, 16);
}

/* True when the first n bytes of an address are zero. */
static __always_inline bool addr_unset(const __u8 *a, __u32 n)
{
	const __u32 *w = (const __u32 *)a;

	return n == 4 ? !w[0] : !(w[0] | w[1] | w[2] | w[3]);
}

/* The fullnat settings of a service, its own (service_sources) or the node's (config), when a
 * source address for the family and a port range are configured. */
static __always_inline struct globals *fullnat_settings(const struct service *svc, __u8 family)
{
	__u32           key = 0;
	struct globals *g;

	if (svc->source == SOURCE_OWN) {
		key = svc->id;
		g = bpf_map_lookup_elem(&service_sources, &key);
	} else {
		g = bpf_map_lookup_elem(&config, &key);
	}
	if (!g || !g->port_low || g->port_high < g->port_low)
		return NULL;
	if (family == AF_INET ? addr_unset(g->snat4, 4) : addr_unset(g->snat6, 16))
		return NULL;
	return g;
}

/* The fullnat source address for a family. */
static __always_inline const __u8 *snat_addr(const struct globals *g, __u8 family)
{
	return family == AF_INET ? g->snat4 : g->snat6;
}

/* Copies to src the source address another node translated fullnat flow k to (flow_sources);
 * -1 when it is not known (evicted: the flow then leaves from this node's source, and breaks). A
 * subprogram: its lookup does not multiply the states of the decision that calls it. */
static __noinline int foreign_source(const struct flow_key *k, __u8 *src)
{
	struct flow_source *s = bpf_map_lookup_elem(&flow_sources, k);

	if (!s)
		return -1;
	__builtin_memcpy(src, s->addr, sizeof(s->addr));
	return 0;
}

/* The 5-tuple of the replies to client flow k sent to backend b: back to the client (nat, g NULL)
 * or to the balancer's source address and port (fullnat). */
static __always_inline void reply_key(struct flow_key *rk, const struct flow_key *k,
				      const struct backend *b, const struct globals *g,
				      __be16 nat_port)
{
	__builtin_memset(rk, 0, sizeof(*rk));
	__builtin_memcpy(rk->src, b->addr, sizeof(rk->src));
	if (g) {
		addr_copy(rk->dst, snat_addr(g, k->family), k->family);
		rk->dport = nat_port;
	} else {
		__builtin_memcpy(rk->dst, k->src, sizeof(rk->dst));
		rk->dport = k->sport;
	}
	rk->sport = backend_port(b, k->dport);
	rk->proto = k->proto;
	rk->family = k->family;
}

/* The client side of client flow k, to restore on its replies. */
static __always_inline void reverse_of(struct reverse *r, const struct flow_key *k, __u32 svc_id,
				       __u32 backend_id)
{
	__builtin_memset(r, 0, sizeof(*r));
	__builtin_memcpy(r->vip, k->dst, sizeof(r->vip));
	__builtin_memcpy(r->client, k->src, sizeof(r->client));
	r->vport = k->dport;
	r->cport = k->sport;
	r->service_id = svc_id;
	r->backend_id = backend_id;
}

/* True when reply entry r belongs to client flow k. */
static __always_inline bool reverse_is(const struct reverse *r, const struct flow_key *k)
{
	return r->cport == k->sport && r->vport == k->dport && addr_eq(r->client, k->src) &&
	       addr_eq(r->vip, k->dst);
}

/* The fullnat source port candidate i (0 <= i < FULLNAT_TRIES) of client flow k. */
static __always_inline __be16 fullnat_port(const struct flow_key *k, const struct globals *g,
					   __u32 i)
{
	__u32 range = (__u32)g->port_high - g->port_low + 1;

	return bpf_htons(g->port_low + flow_hash(k, i + 1) % range);
}

/* True when the fullnat port of reply entry r (keyed rk) may go to another flow: its flow is
 * gone, was rebalanced, or has been idle for FULLNAT_IDLE_NS (long past TIME_WAIT). */
static __always_inline bool reply_reusable(const struct flow_key *rk, const struct reverse *r,
					   __u64 now)
{
	struct flow_key ck = {
		.sport = r->cport,
		.dport = r->vport,
		.proto = rk->proto,
		.family = rk->family,
	};
	struct flow *f;

	__builtin_memcpy(ck.src, r->client, sizeof(ck.src));
	__builtin_memcpy(ck.dst, r->vip, sizeof(ck.dst));
	f = bpf_map_lookup_elem(&flows, &ck);
	return !f || f->backend_id != r->backend_id || f->nat_port != rk->dport ||
	       (__s64)(now - f->last_seen) >= (__s64)FULLNAT_IDLE_NS;
}

/* Claims a fullnat source port for client flow k and returns it, 0 when none is free (a port is
 * never 0: fullnat_settings refuses a range from 0). The first of a few hashed ports whose reply
 * 5-tuple rk (its port aside) is free or, when none is, whose flow is over. Nothing but the LRU
 * and this frees a port, as closed connections are not tracked. A global function, checked once
 * on its own rather than in every state of a new flow's decision: its pointers are never NULL
 * (the verifier does not know), and it returns the port rather than leaving it in *rk for the
 * caller, as rk is working space. */
__noinline int fullnat_claim(const struct flow_key *k, const struct globals *g, struct flow_key *rk,
			     const struct reverse *r, __u64 now)
{
	struct reverse *old;

	if (!k || !g || !rk || !r)
		return 0;
	for (__u32 i = 0; i < FULLNAT_TRIES; i++) {
		rk->dport = fullnat_port(k, g, i);
		if (!bpf_map_update_elem(&replies, rk, r, BPF_NOEXIST))
			return rk->dport;
	}
	for (__u32 i = 0; i < FULLNAT_TRIES; i++) {
		rk->dport = fullnat_port(k, g, i);
		old = bpf_map_lookup_elem(&replies, rk);
		if (old && reply_reusable(rk, old, now) &&
		    !bpf_map_update_elem(&replies, rk, r, BPF_EXIST))
			return rk->dport;
	}
	return 0;
}

/* Deletes the reply entry of a flow that is being rebalanced, if it is still that flow's. */
static __always_inline void reply_forget(const struct flow *f, const struct flow_key *k,
					 const struct service *svc, const struct globals *g)
{
	__u32           id = f->backend_id;
	struct backend *b = bpf_map_lookup_elem(&backends, &id);
	struct reverse *r;
	struct flow_key rk;

	if (!b || mode_direct(svc->mode))
		return;
	reply_key(&rk, k, b, g, f->nat_port);
	if (g && (f->flags & FLOW_FOREIGN_SOURCE) && foreign_source(k, rk.dst))
		return;
	r = bpf_map_lookup_elem(&replies, &rk);
	if (r && reverse_is(r, k))
		bpf_map_delete_elem(&replies, &rk);
}

/* Re-creates the reply entry of an established nat/fullnat flow if the LRU evicted it. */
static __always_inline void reply_ensure(const struct flow_key *k, const struct service *svc,
					 const struct globals *g, const struct target *t)
{
	struct reverse  r;
	struct flow_key rk;

	if (mode_direct(svc->mode))
		return;
	reply_key(&rk, k, t->b, g, t->nat_port);
	if (t->foreign && foreign_source(k, rk.dst))
		return;
	if (bpf_map_lookup_elem(&replies, &rk))
		return;
	reverse_of(&r, k, svc->id, t->id);
	bpf_map_update_elem(&replies, &rk, &r, BPF_NOEXIST);
}

/* Hands flow k, just created or closing at now, to the replicator reading flow_events, if one
 * does (and not for `sluice which`); a full ring counts a drop in flow_event_drops. The ring's
 * own wake-up policy applies: the reader is woken only by a record it is waiting for (it has read
 * everything before), and it pauses between reads, so that a lone flow leaves for the peers at
 * once and a burst costs one wake-up per pause. */
static __always_inline void flow_announce(const struct flow_key *k, const struct flow *f, __u64 now)
{
	__u32              zero = 0;
	struct globals    *g;
	struct flow_event *e;
	__u64             *drops;

	if (count_nothing)
		return;
	g = bpf_map_lookup_elem(&config, &zero);
	if (!g || !g->flow_events)
		return;
	e = bpf_ringbuf_reserve(&flow_events, sizeof(*e), 0);
	if (!e) {
		drops = bpf_map_lookup_elem(&flow_event_drops, &zero);
		if (drops)
			*drops += 1;
		return;
	}
	e->key = *k;
	e->flow = *f;
	e->flow.last_seen = now; /* f's is refreshed at most once a second */
	bpf_ringbuf_submit(e, 0);
}

/* flow_select's errors. */
#define SELECT_NO_BACKEND -1 /* the service has no backend for a new flow */
#define SELECT_NO_PORT    -2 /* fullnat: no free source port */
#define SELECT_RETIRED    -3 /* the service is retired: it takes no new flow */
#define SELECT_REFUSED    -4 /* the service's access lists refuse the client */
#define SELECT_LIMITED    -5 /* the flow is over one of the service's limits */

/* Balances client flow k afresh: picks a backend, claims the reply 5-tuple and records the flow.
 * midflow: the packet is a TCP segment past the SYN (see backend_pick). closing: it is a FIN or a
 * reset (the tail of a connection another node began, when ECMP moved it), so the flow is recorded
 * closing and never counted open. Returns 0, SELECT_NO_BACKEND, SELECT_REFUSED, SELECT_LIMITED or
 * SELECT_NO_PORT. */
static __always_inline int flow_create(const struct flow_key *k, const struct service *svc,
				       const struct globals *g, struct target *t, __u64 now,
				       bool midflow, bool closing)
{
	struct flow     f = {.service_id = svc->id, .last_seen = now};
	struct flow_key rk;
	struct reverse  r;
	int             id = backend_pick(svc, k, now, midflow);

	if (id == PICK_REFUSED)
		return SELECT_REFUSED;
	if (id == PICK_LIMITED)
		return SELECT_LIMITED;
	if (id < 0)
		return SELECT_NO_BACKEND;
	t->id = id;
	if (!(t->b = backend_get(t->id, backend_family(svc, k))))
		return SELECT_NO_BACKEND;
	f.backend_id = t->id;
	if (!mode_direct(svc->mode)) {
		reverse_of(&r, k, svc->id, t->id);
		reply_key(&rk, k, t->b, g, 0);
		if (g) {
			f.nat_port = fullnat_claim(k, g, &rk, &r, now);
			if (!f.nat_port)
				return SELECT_NO_PORT;
		} else {
			bpf_map_update_elem(&replies, &rk, &r, BPF_ANY);
		}
	}
	if (closing)
		f.flags = FLOW_CLOSING;
	bpf_map_update_elem(&flows, k, &f, BPF_ANY);
	flow_announce(k, &f, now);
	if (!closing) {
		conns_count(svc->flags, t->id, true);
		limits_count(svc->flags, svc->id, k, true);
	}
	t->nat_port = f.nat_port;
	t->new_flow = 1;
	return 0;
}

/* Finds the backend of a packet of a service's flow: the flow's own while it is valid, a fresh
 * pick for a new flow, a TCP SYN (a reused source port must rebalance) or a fullnat flow without
 * a source port (recorded before the service turned fullnat). g: fullnat settings, or NULL.
 * Returns 0, SELECT_RETIRED when a retired service would need a fresh pick, or flow_create's
 * error. */
static __always_inline int flow_select(const struct packet *p, const struct service *svc,
				       const struct globals *g, struct target *t)
{
	const struct flow_key *k = &p->key;
	__u64 now = bpf_ktime_get_coarse_ns(); /* tick granularity is plenty, and it is cheap */
	struct flow *f = bpf_map_lookup_elem(&flows, k);
	bool syn = k->proto == IPPROTO_TCP && (p->tcp_flags & (TCP_SYN | TCP_ACK)) == TCP_SYN;

	if (f && !syn && (!g || f->nat_port) &&
	    (t->b = backend_get(f->backend_id, backend_family(svc, k)))) {
		t->id = f->backend_id;
		t->nat_port = f->nat_port;
		t->foreign = g && (f->flags & FLOW_FOREIGN_SOURCE);
		if ((p->tcp_flags & (TCP_FIN | TCP_RST)) && !(f->flags & FLOW_CLOSING)) {
			f->flags |= FLOW_CLOSING;
			flow_announce(k, f, now);
			conns_count(svc->flags, f->backend_id, false);
			limits_count(svc->flags, svc->id, k, false);
		}
		if (now - f->last_seen >= FLOW_REFRESH_NS) {
			f->last_seen = now;
			reply_ensure(k, svc, g, t);
		}
		return 0;
	}
	if (svc->flags & SERVICE_RETIRED)
		return SELECT_RETIRED;
	if (f) {
		reply_forget(f, k, svc, g);
		if (!(f->flags & FLOW_CLOSING)) {
			conns_count(svc->flags, f->backend_id, false);
			limits_count(svc->flags, svc->id, k, false);
		}
	}
	/* No flow: a mid-flow TCP segment (neither a SYN nor a reset) of a connection another node
	 * or an earlier table began gets a second chance. */
	return flow_create(k, svc, g, t, now,
			   !f && k->proto == IPPROTO_TCP && !(p->tcp_flags & (TCP_SYN | TCP_RST)),
			   k->proto == IPPROTO_TCP && (p->tcp_flags & (TCP_FIN | TCP_RST)));
}

/* Counts a new flow, and a packet of l3_len bytes when it was handed on (sent), for a service and
 * a backend. */
static __always_inline void count_packet(__u32 svc_id, __u32 backend_id, __u32 l3_len,
					 __u8 new_flow, bool sent)
{
	struct stats *s;

	if (count_nothing || (!sent && !new_flow))
		return;
	s = bpf_map_lookup_elem(&service_stats, &svc_id);
	if (s) {
		s->packets += sent;
		s->bytes += sent ? l3_len : 0;
		s->flows += new_flow;
	}
	s = bpf_map_lookup_elem(&backend_stats, &backend_id);
	if (s) {
		s->packets += sent;
		s->bytes += sent ? l3_len : 0;
		s->flows += new_flow;
	}
}

#endif
