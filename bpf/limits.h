/* Sluice eBPF datapath: a service's limits on new flows: new flows per second for the service and
 * for one client (GCRA with a second's burst), and active flows of the service and of one client
 * (counted like a backend's: opened and closed by the program, the ones that end unseen by the
 * loader's recount). Only new flows are judged: established ones are never touched. */
#ifndef SLUICE_LIMITS_H
#define SLUICE_LIMITS_H

#include "maps.h"

#define NSEC_PER_SEC 1000000000ULL

/* backend_pick's error for a flow over one of its service's limits. */
#define PICK_LIMITED -3

/* GCRA: true when a new flow at now conforms to one per interval ns on average, with a burst of a
 * second's worth, and then counts it in *tat. The read-modify-write is not atomic: two CPUs
 * judging flows of one service in the same instant may both pass on one slot, so the limit admits
 * at most one flow more per CPU and race. */
static __always_inline bool gcra_take(__u64 *tat, __u64 now, __u64 interval)
{
	__u64 base = *tat > now ? *tat : now;

	if (base - now + interval > NSEC_PER_SEC)
		return false;
	*tat = base + interval;
	return true;
}

/* Active flows by opened, closed and lost counts (lost is a loader's correction, modulo 2^64). */
static __always_inline __u64 active_of(__u64 opened, __u64 closed, __u64 lost)
{
	__s64 n = (__s64)(opened - closed - lost);

	return n > 0 ? n : 0;
}

/* The client key of flow k of service sid. */
static __always_inline void client_key_of(struct client_key *ck, const struct flow_key *k,
					  __u32 sid)
{
	__builtin_memcpy(ck->addr, k->src, sizeof(ck->addr));
	ck->service_id = sid;
	ck->pad = 0;
}

/* The state of flow k's client of service sid, made when missing; NULL when it cannot be. */
static __always_inline struct client_state *client_of(struct client_key     *ck,
						      const struct flow_key *k, __u32 sid)
{
	static const struct client_state fresh = {};

	struct client_state *cs;

	client_key_of(ck, k, sid);
	cs = bpf_map_lookup_elem(&clients, ck);
	if (cs)
		return cs;
	bpf_map_update_elem(&clients, ck, &fresh, BPF_NOEXIST);
	return bpf_map_lookup_elem(&clients, ck);
}

/* The limit in o that new flow k of service sid is over, REFUSAL_NONE when none; takes a rate
 * slot when it is over none. ck is working space. */
static __always_inline enum refusal over_limits(const struct service_settings *o,
						const struct flow_key *k, __u32 sid, __u64 now,
						struct client_key *ck)
{
	struct client_state *cs = NULL;
	struct conn_counts  *c;
	__u64               *tat, *lost;

	/* The counts first, which take nothing; then the client's rate before the service's, so
	 * that one client's flood does not spend the service's rate. */
	if (o->client_rate_ns || o->max_client_conns)
		cs = client_of(ck, k, sid);
	if (cs && o->max_client_conns &&
	    active_of(cs->opened, cs->closed, cs->lost) >= o->max_client_conns)
		return REFUSAL_CLIENT_CONNS;
	if (o->max_conns && (c = bpf_map_lookup_elem(&service_conns, &sid))) {
		lost = bpf_map_lookup_elem(&service_lost, &sid);
		if (active_of(c->opened, c->closed, lost ? *lost : 0) >= o->max_conns)
			return REFUSAL_CONNS;
	}
	if (cs && o->client_rate_ns && !gcra_take(&cs->tat, now, o->client_rate_ns))
		return REFUSAL_CLIENT_RATE;
	if (o->rate_ns && (tat = bpf_map_lookup_elem(&service_rate, &sid)) &&
	    !gcra_take(tat, now, o->rate_ns))
		return REFUSAL_RATE;
	return REFUSAL_NONE;
}

/* Counts a new flow a service refused, and why. */
static __always_inline void count_refusal(__u32 sid, enum refusal why)
{
	struct refusals *r;

	if (count_nothing)
		return;
	r = bpf_map_lookup_elem(&service_refusals, &sid);
	if (!r)
		return;
	switch (why) {
	case REFUSAL_SOURCE:
		r->source++;
		break;
	case REFUSAL_CLIENT_CONNS:
		r->client_conns++;
		break;
	case REFUSAL_CONNS:
		r->conns++;
		break;
	case REFUSAL_CLIENT_RATE:
		r->client_rate++;
		break;
	case REFUSAL_RATE:
		r->rate++;
		break;
	default:
		break;
	}
}

/* Counts a flow of a limited service opened or closed, for the service and its client. */
static __always_inline void limits_count(__u8 flags, __u32 sid, const struct flow_key *k,
					 bool opened)
{
	struct client_key    ck;
	struct client_state *cs;
	struct conn_counts  *c;

	if (!(flags & SERVICE_LIMITS) || count_nothing)
		return;
	c = bpf_map_lookup_elem(&service_conns, &sid);
	if (c) {
		if (opened)
			__sync_fetch_and_add(&c->opened, 1);
		else
			__sync_fetch_and_add(&c->closed, 1);
	}
	client_key_of(&ck, k, sid);
	cs = bpf_map_lookup_elem(&clients, &ck);
	if (!cs)
		return;
	if (opened)
		__sync_fetch_and_add(&cs->opened, 1);
	else
		__sync_fetch_and_add(&cs->closed, 1);
}

#endif
