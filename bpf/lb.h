/* Sluice eBPF datapath: what to do with a TCP/UDP packet: balance it (a VIP's flow), translate it
 * back (a reply of a nat/fullnat flow) or leave it to the stack. */
#ifndef SLUICE_LB_H
#define SLUICE_LB_H

#include "flow.h"

/* The outcome of a decision. */
enum verdict {
	VERDICT_PASS, /* to the stack, untouched */
	VERDICT_DROP,
	VERDICT_FORWARD, /* rewritten per the plan and routed */
};

/* A forwarding plan: the 5-tuple the packet leaves with and the address to route it to, and
 * where the packet counts once its fate is known. */
struct plan {
	struct flow_key out;         /* the rewritten 5-tuple (the original one for dsr) */
	__u8            nexthop[16]; /* route lookup address: out.dst, or the backend for dsr */
	__u8            nat;         /* addresses or ports change */
	__u8            counted;  /* a client's packet to a backend: in the stats once handed on */
	__u8            new_flow; /* counted: the packet opened a flow */
	__u8            tunnel;   /* encapsulate (MODE_TUNNEL) rather than rewrite */
	__u32           svc_id;   /* its service (NO_SERVICE: none), for struct unforwarded */
	__u32           backend_id; /* counted: the backend it goes to */
};

/* Fills the plan of a packet of a service's flow sent to backend t for the service's mode. */
static __always_inline void plan_service(const struct packet *p, const struct service *svc,
					 const struct globals *g, const struct target *t,
					 struct plan *pl)
{
	pl->out = p->key;
	__builtin_memcpy(pl->nexthop, t->b->addr, sizeof(pl->nexthop));
	pl->counted = 1;
	pl->new_flow = t->new_flow;
	pl->svc_id = svc->id;
	pl->backend_id = t->id;
	pl->nat = !mode_direct(svc->mode);
	pl->tunnel = svc->mode == MODE_TUNNEL;
	if (!pl->nat)
		return;
	__builtin_memcpy(pl->out.dst, t->b->addr, sizeof(pl->out.dst));
	pl->out.dport = backend_port(t->b, p->key.dport);
	if (g) {
		if (!t->foreign || foreign_source(&p->key, pl->out.src))
			addr_copy(pl->out.src, snat_addr(g, p->key.family), p->key.family);
		pl->out.sport = t->nat_port;
	}
}

/* True when a TCP flow over its service's limits is reset (left to the stack, which answers a
 * SYN to the VIP with a reset as for fallback reject) rather than dropped. */
static __always_inline bool limit_reset(const struct service *svc, const struct flow_key *k)
{
	__u32                    sid = svc->id;
	struct service_settings *o = bpf_map_lookup_elem(&service_opts, &sid);

	return o && o->limit_action == LIMIT_RESET && k->proto == IPPROTO_TCP;
}

/* Balances a packet sent to a service. */
static __always_inline int lb_service(const struct packet *p, const struct service *svc,
				      struct plan *pl)
{
	struct globals *g = NULL;
	struct target   t = {};
	int             err;

	if (svc->mode < MODE_NAT || svc->mode > MODE_TUNNEL)
		return VERDICT_PASS;
	if (svc->mode == MODE_FULLNAT && !(g = fullnat_settings(svc, p->key.family)))
		return VERDICT_DROP;
	err = flow_select(p, svc, g, &t);
	if (err == SELECT_RETIRED)
		return VERDICT_PASS;
	if (err == SELECT_NO_BACKEND)
		return svc->fallback == FALLBACK_REJECT ? VERDICT_PASS : VERDICT_DROP;
	if (err == SELECT_LIMITED)
		return limit_reset(svc, &p->key) ? VERDICT_PASS : VERDICT_DROP;
	if (err)
		return VERDICT_DROP;
	plan_service(p, svc, g, &t, pl);
	return VERDICT_FORWARD;
}

/* Translates a backend's reply of a nat/fullnat flow back to the client's view. */
static __always_inline int lb_reply(const struct packet *p, struct plan *pl)
{
	struct reverse *r = bpf_map_lookup_elem(&replies, &p->key);

	if (!r || p->ttl <= 1)
		return VERDICT_PASS;
	pl->out = p->key;
	__builtin_memcpy(pl->out.src, r->vip, sizeof(pl->out.src));
	__builtin_memcpy(pl->out.dst, r->client, sizeof(pl->out.dst));
	pl->out.sport = r->vport;
	pl->out.dport = r->cport;
	__builtin_memcpy(pl->nexthop, r->client, sizeof(pl->nexthop));
	pl->nat = 1;
	pl->tunnel = 0;
	pl->counted = 0;
	pl->svc_id = r->service_id;
	return VERDICT_FORWARD;
}

/* Decides what to do with a TCP or UDP packet, filling pl to forward it. TTL <= 1 is left to
 * the stack (time exceeded). A subprogram: its stack frame is not the rewrite's. */
static __noinline int lb_decide(const struct packet *p, struct plan *pl)
{
	const struct flow_key *k = &p->key;
	struct service        *svc = service_lookup(k->dst, k->dport, k->proto, k->family);

	if (!svc)
		return lb_reply(p, pl);
	if (p->ttl <= 1)
		return VERDICT_PASS;
	return lb_service(p, svc, pl);
}

#endif
