/* Sluice eBPF datapath: how a new flow picks its backend: the service's table indexed by the flow
 * hash (maglev, hash, rr...) or the source hash (sh), the least loaded backend (lc, wlc), the
 * backends' connection thresholds, and persistence (a client keeps its backend). Services that use
 * none of these cost one table lookup, as before. */
#ifndef SLUICE_SESSIONS_H
#define SLUICE_SESSIONS_H

#include "maps.h"
#include "hash.h"

#define PROBE_LIMIT 2048 /* table slots tried past an overloaded backend's */

/* Set in the copy of the program that `sluice which` runs on its synthetic packet, so that the
 * packet is counted nowhere and no session is recorded; the verifier removes the test from the
 * program traffic runs. */
const volatile __u8 count_nothing = 0;

#include "limits.h"

/* Backend id when it is in use and of family (0: any), or NULL. */
static __always_inline struct backend *backend_get(__u32 id, __u8 family)
{
	struct backend *b = bpf_map_lookup_elem(&backends, &id);

	if (!b || !(b->flags & BACKEND_VALID) || (family && b->family != family))
		return NULL;
	return b;
}

/* The family backend_get wants for flow k of a service: the flow's, but any for mode tunnel,
 * whose outer header is of the backend's family (IPv6 in IPv4, IPv4 in IPv6). */
static __always_inline __u8 backend_family(const struct service *svc, const struct flow_key *k)
{
	return svc->mode == MODE_TUNNEL ? 0 : k->family;
}

/* The hash that indexes a service's table for flow k: the 5-tuple's, or for sh the source
 * address's (and port's, with sh_port). */
static __always_inline __u32 table_hash(__u8 flags, const struct flow_key *k)
{
	if (!(flags & SERVICE_HASH_SOURCE))
		return flow_hash(k, 0);
	return source_hash(k, flags & SERVICE_HASH_SPORT);
}

/* A backend's active flows, and its counts (NULL when the id is out of range). */
static __always_inline __u64 backend_active(__u32 id, struct conn_counts **conns)
{
	struct conn_counts *c = bpf_map_lookup_elem(&backend_conns, &id);
	__u64              *lost = bpf_map_lookup_elem(&backend_lost, &id);
	__s64               n;

	*conns = c;
	if (!c)
		return 0;
	n = (__s64)(c->opened - c->closed - (lost ? *lost : 0));
	return n > 0 ? n : 0;
}

/* True when backend id may take one more flow under its connection thresholds: it is not
 * overloaded, or no longer (down to min_conns). Updates the overload state. */
static __always_inline bool backend_has_room(__u8 flags, __u32 id)
{
	struct conn_counts      *c;
	struct backend_settings *o;
	__u64                    n;

	if (!(flags & SERVICE_COUNT_CONNS))
		return true;
	o = bpf_map_lookup_elem(&backend_opts, &id);
	if (!o || !o->max_conns)
		return true;
	n = backend_active(id, &c);
	if (!c)
		return true;
	if (c->overloaded) {
		if (n > o->min_conns)
			return false;
		c->overloaded = 0;
		return true;
	}
	if (n >= o->max_conns) {
		c->overloaded = 1;
		return false;
	}
	return true;
}

/* Counts a flow opened to, or closed at, backend id of a service that counts connections. */
static __always_inline void conns_count(__u8 flags, __u32 id, bool opened)
{
	struct conn_counts *c;

	if (!(flags & SERVICE_COUNT_CONNS) || count_nothing)
		return;
	c = bpf_map_lookup_elem(&backend_conns, &id);
	if (!c)
		return;
	if (opened)
		__sync_fetch_and_add(&c->opened, 1);
	else
		__sync_fetch_and_add(&c->closed, 1);
}

/* A scan over a service's ring by bpf_loop: the slots from start on, wrapping. */
struct ring_scan {
	__u32 offset, size, start;
	__u8  flags, family, found, pad;
	__u32 id;     /* the pick so far */
	__u64 best_n; /* its active flows (least connections) */
	__u64 best_w; /* its weight (wlc; 1 for lc) */
};

/* The backend id in slot i of a scan, when it is in use; false to skip it. */
static __always_inline bool scan_slot(const struct ring_scan *s, __u64 i, __u32 *id)
{
	__u32  slot = s->offset + (__u32)((s->start + i) % s->size);
	__u32 *bid = bpf_map_lookup_elem(&maglev, &slot);

	if (!bid || !backend_get(*bid, s->family))
		return false;
	*id = *bid;
	return true;
}

/* bpf_loop step: stops at the first backend with room. */
static long probe_step(__u64 i, void *ctx)
{
	struct ring_scan *s = ctx;
	__u32             id;

	if (!scan_slot(s, i, &id) || !backend_has_room(s->flags, id))
		return 0;
	s->id = id;
	s->found = 1;
	return 1;
}

/* bpf_loop step: keeps the backend with the fewest active flows per weight. */
static long least_step(__u64 i, void *ctx)
{
	struct ring_scan        *s = ctx;
	struct conn_counts      *c;
	struct backend_settings *o;
	__u64                    n, w = 1;
	__u32                    id;

	if (!scan_slot(s, i, &id) || !backend_has_room(s->flags, id))
		return 0;
	if (s->flags & SERVICE_WEIGHTED) {
		o = bpf_map_lookup_elem(&backend_opts, &id);
		if (!o || !o->weight)
			return 0;
		w = o->weight;
	}
	n = backend_active(id, &c);
	/* n/w < best_n/best_w, without division */
	if (!s->found || n * s->best_w < s->best_n * w) {
		s->id = id;
		s->best_n = n;
		s->best_w = w;
		s->found = 1;
	}
	return 0;
}

/* The backend id in the table slot of flow k's hash (its slot in *slot), regardless of
 * thresholds and persistence; -1 when the table is empty. */
static __always_inline int table_lookup(const struct service *svc, const struct flow_key *k,
					__u32 *slot, __u32 *id)
{
	__u32 at, *bid;

	if (!svc->ring_size)
		return -1;
	*slot = table_hash(svc->flags, k) % svc->ring_size;
	at = svc->ring_offset + *slot;
	bid = bpf_map_lookup_elem(&maglev, &at);
	if (!bid)
		return -1;
	*id = *bid;
	return 0;
}

/* Picks a new flow's backend from the service's table: the slot of the flow's hash, or, when
 * that backend is at its connection threshold, the next slot whose backend is not. */
static __always_inline int table_pick(const struct service *svc, const struct flow_key *k,
				      __u32 *id)
{
	struct ring_scan s = {
		.offset = svc->ring_offset,
		.size = svc->ring_size,
		.flags = svc->flags,
		.family = backend_family(svc, k),
	};

	if (table_lookup(svc, k, &s.start, id))
		return -1;
	if (backend_has_room(svc->flags, *id))
		return 0;
	bpf_loop(s.size < PROBE_LIMIT ? s.size : PROBE_LIMIT, probe_step, &s, 0);
	if (!s.found)
		return -1;
	*id = s.id;
	return 0;
}

/* Picks the backend with the fewest active flows (per weight for wlc) among the ring's, which
 * lists each backend that takes new flows once; ties go to the first from a hashed start. */
static __always_inline int least_pick(const struct service *svc, const struct flow_key *k,
				      __u32 *id)
{
	struct ring_scan s = {
		.offset = svc->ring_offset,
		.size = svc->ring_size,
		.flags = svc->flags,
		.family = backend_family(svc, k),
	};

	if (!svc->ring_size)
		return -1;
	s.start = flow_hash(k, 0) % svc->ring_size;
	bpf_loop(s.size < MAX_COUNTED ? s.size : MAX_COUNTED, least_step, &s, 0);
	if (!s.found)
		return -1;
	*id = s.id;
	return 0;
}

/* The persistence key of client flow k: the service and the source address masked to prefix
 * bits. */
static __always_inline void persist_key_of(struct persist_key *pk, const struct flow_key *k,
					   __u32 svc_id, __u8 prefix)
{
	const __u32 *from = (const __u32 *)k->src;
	__u32       *to = (__u32 *)pk->addr;

	__builtin_memset(pk, 0, sizeof(*pk));
#pragma unroll
	for (int i = 0; i < 4; i++) {
		int bits = (int)prefix - 32 * i;

		if (bits >= 32)
			to[i] = from[i];
		else if (bits > 0)
			to[i] = from[i] & bpf_htonl(0xffffffffu << (32 - bits));
	}
	pk->service_id = svc_id;
	pk->family = k->family;
}

/* The backend a persistent client had, while its last new flow is younger than the timeout and
 * the backend still takes new flows; -1 otherwise. */
static __always_inline int persist_pick(const struct service *svc, const struct service_settings *o,
					const struct persist_key *pk, __u8 family, __u64 now,
					__u32 *id)
{
	struct persist_entry *e = bpf_map_lookup_elem(&persist, pk);
	struct backend       *b;

	if (!e || (__s64)(now - e->last_new) >= (__s64)o->persist_ns)
		return -1;
	b = backend_get(e->backend_id, family);
	if (!b || !(b->flags & BACKEND_TAKES_NEW) || !backend_has_room(svc->flags, e->backend_id))
		return -1;
	*id = e->backend_id;
	return 0;
}

/* The keys a new flow's pick looks up with service_opts' settings: too big for the stack, which
 * they would share with the rest of the decision. */
struct pick_work {
	struct persist_key   pk;
	struct persist_entry pe;
	struct source_key    sk;
	struct client_key    ck;
};

/* Per-CPU working space of backend_pick (unpinned, no state). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct pick_work));
	__uint(max_entries, 1);
} pick_scratch SEC(".maps");

/* True when a service's access lists refuse client flow k a new flow: its address is in
 * source_deny, or source_allow is set and it is not in it. sk is working space. */
static __always_inline bool source_refused(const struct service_settings *o,
					   const struct flow_key *k, __u32 sid,
					   struct source_key *sk)
{
	if (!o->sources)
		return false;
	sk->prefixlen = 32 + (k->family == AF_INET ? 32 : 128);
	sk->service_id = sid;
	__builtin_memcpy(sk->addr, k->src, sizeof(sk->addr));
	if ((o->sources & SOURCES_DENY) && bpf_map_lookup_elem(&source_deny, sk))
		return true;
	return (o->sources & SOURCES_ALLOW) && !bpf_map_lookup_elem(&source_allow, sk);
}

/* Second chance: the backend the previous generation of the service's table gave the slot of
 * mid-flow packet k, when the slot changed in the last flow_timeout and that backend is still
 * the service's; 0 with it in *id, else -1. */
static __always_inline int second_chance(const struct service *svc, const struct flow_key *k,
					 __u64 now, __u32 *id)
{
	struct prev_slot *ps;
	__u32             slot, at, cur, sid = svc->id;
	__u64            *n;

	if ((svc->flags & SERVICE_LEAST_CONN) || table_lookup(svc, k, &slot, &cur))
		return -1;
	at = svc->ring_offset + slot;
	ps = bpf_map_lookup_elem(&maglev_prev, &at);
	if (!ps || ps->service_id != svc->id || (__s64)(ps->until_ns - now) <= 0 ||
	    ps->backend_id == cur || !backend_get(ps->backend_id, backend_family(svc, k)))
		return -1;
	*id = ps->backend_id;
	if (!count_nothing && (n = bpf_map_lookup_elem(&second_chances, &sid)))
		*n += 1;
	return 0;
}

/* backend_pick's error for a client its service's access lists refuse. */
#define PICK_REFUSED -2

/* Picks the backend of a new flow k of a service at time now and returns its id; -1 when none
 * can take it (an id past MAX_BACKENDS, which backend_get refuses anyway, included), PICK_REFUSED
 * when the service refuses the client, PICK_LIMITED when the flow is over one of the service's
 * limits. A mid-flow packet (midflow) gets a second chance before the table. A global function,
 * checked once on its own rather than in every state of the decision: its pointers are never NULL
 * (the verifier does not know), and the id is its result rather than written to the caller. */
__noinline int backend_pick(const struct service *svc, const struct flow_key *k, __u64 now,
			    bool midflow)
{
	struct service_settings *o = NULL;
	struct pick_work        *w = NULL;
	__u32                    sid, id = 0, zero = 0;
	int                      err = -1;

	if (!svc || !k)
		return -1;
	sid = svc->id;
	if (svc->flags & SERVICE_OPTS) {
		o = bpf_map_lookup_elem(&service_opts, &sid);
		w = bpf_map_lookup_elem(&pick_scratch, &zero);
		if (!o || !w)
			return -1;
		if (source_refused(o, k, sid, &w->sk)) {
			count_refusal(sid, REFUSAL_SOURCE);
			return PICK_REFUSED;
		}
		if (svc->flags & SERVICE_LIMITS) {
			enum refusal why = over_limits(o, k, sid, now, &w->ck);

			if (why != REFUSAL_NONE) {
				count_refusal(sid, why);
				return PICK_LIMITED;
			}
		}
		if (o->persist_ns) {
			persist_key_of(&w->pk, k, sid, o->persist_prefix);
			err = persist_pick(svc, o, &w->pk, backend_family(svc, k), now, &id);
		} else {
			w = NULL;
		}
	}
	if (err && midflow)
		err = second_chance(svc, k, now, &id);
	if (err)
		err = svc->flags & SERVICE_LEAST_CONN ? least_pick(svc, k, &id)
						      : table_pick(svc, k, &id);
	if (err)
		return err;
	if (w && !count_nothing) {
		w->pe.backend_id = id;
		w->pe.last_new = now;
		bpf_map_update_elem(&persist, &w->pk, &w->pe, BPF_ANY);
	}
	return id < MAX_BACKENDS ? (int)id : -1;
}

#endif
