/* Sluice eBPF datapath: maps, pinned by name under the loader's pin path. */
#ifndef SLUICE_MAPS_H
#define SLUICE_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "constants.h"
#include "structs.h"

/* Virtual services: (vip, port, proto) -> service. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct vip_key);
	__type(value, struct service);
	__uint(max_entries, MAX_VIPS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} vips SEC(".maps");

/* Backends by id. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct backend);
	__uint(max_entries, MAX_BACKENDS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} backends SEC(".maps");

/* Every service's Maglev table end to end: slot -> backend id. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, MAGLEV_SLOTS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} maglev SEC(".maps");

/* Client flows -> their backend, so established flows survive backend changes. flows and replies
 * keep an LRU list per CPU (BPF_F_NO_COMMON_LRU): a new flow's inserts take their nodes from the
 * CPU's own list, without the lock of the list all CPUs share, and each CPU evicts within its share
 * (max_entries / possible CPUs). The loader adopts maps pinned with the common list. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct flow_key);
	__type(value, struct flow);
	__uint(max_entries, MAX_FLOWS);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} flows SEC(".maps");

/* Backend-side 5-tuple of a nat/fullnat flow's replies -> the client side to restore. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct flow_key);
	__type(value, struct reverse);
	__uint(max_entries, MAX_FLOWS);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} replies SEC(".maps");

/* Per-service counters by service id. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct stats);
	__uint(max_entries, MAX_SERVICES);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} service_stats SEC(".maps");

/* Per-backend counters by backend id. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct stats);
	__uint(max_entries, MAX_BACKENDS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} backend_stats SEC(".maps");

/* Global settings written by the loader, one entry. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct globals);
	__uint(max_entries, 1);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} config SEC(".maps");

/* Ingress ifindex -> the interface's MAC, for every interface the loader attached XDP to: XDP has
 * no packet type, so this is how sluice_xdp tells a frame for another host's MAC. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct if_mac);
	__uint(max_entries, MAX_INTERFACES);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} if_macs SEC(".maps");

/* Per-service settings beyond struct service, by service id (persistence). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct service_settings);
	__uint(max_entries, MAX_SERVICES);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} service_opts SEC(".maps");

/* The fullnat source address and port range of the services that have their own
 * (fullnat_source), by service id: read for those whose struct service.source is SOURCE_OWN. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct globals);
	__uint(max_entries, MAX_SERVICES);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} service_sources SEC(".maps");

/* Per-backend weight and connection thresholds, by backend id. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct backend_settings);
	__uint(max_entries, MAX_BACKENDS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} backend_opts SEC(".maps");

/* Per-backend connection counts kept by the program, by backend id. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct conn_counts);
	__uint(max_entries, MAX_BACKENDS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} backend_conns SEC(".maps");

/* Per-backend count of flows that ended without the program seeing it (idle, evicted), by backend
 * id: written by the loader's recount, read by the program. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, MAX_BACKENDS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} backend_lost SEC(".maps");

/* Persistent clients -> their backend, refreshed by each new flow. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct persist_key);
	__type(value, struct persist_entry);
	__uint(max_entries, MAX_PERSIST);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} persist SEC(".maps");

/* The client prefixes that may open new flows, per service (source_allow). */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct source_key);
	__type(value, __u8);
	__uint(max_entries, MAX_SOURCES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} source_allow SEC(".maps");

/* The client prefixes that may not open new flows, per service (source_deny). */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct source_key);
	__type(value, __u8);
	__uint(max_entries, MAX_SOURCES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} source_deny SEC(".maps");

/* Per-service GCRA state of new_connections_per_second: the theoretical arrival time of the next
 * new flow, by service id. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, MAX_SERVICES);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} service_rate SEC(".maps");

/* Per-service flow counts for the connections limit, by service id (as backend_conns). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct conn_counts);
	__uint(max_entries, MAX_SERVICES);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} service_conns SEC(".maps");

/* Per-service flows that ended unseen, by service id (as backend_lost). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, MAX_SERVICES);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} service_lost SEC(".maps");

/* The clients of services with per-source limits: rate state and flow counts (LRU: a client
 * evicted starts afresh). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct client_key);
	__type(value, struct client_state);
	__uint(max_entries, MAX_CLIENTS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} clients SEC(".maps");

/* Per-service counts of refused new flows by reason, by service id. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct refusals);
	__uint(max_entries, MAX_SERVICES);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} service_refusals SEC(".maps");

/* Per-service counts of packets the program could not forward by reason, by service id. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct unforwarded);
	__uint(max_entries, MAX_SERVICES);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} service_unforwarded SEC(".maps");

/* The flows the program creates and those it sees closing (struct flow_event), while a replicator
 * reads them (config's flow_events): nothing per established packet, and never a wait. The reader
 * polls: the program asks for no wakeup. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, FLOW_EVENTS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} flow_events SEC(".maps");

/* Flow events lost to a full flow_events (per CPU, one entry). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} flow_event_drops SEC(".maps");

/* Table slots whose backend changed in the last flow_timeout: global slot (as in maglev) -> the
 * backend before the change (second chance). Written by the loader, expired by until_ns. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct prev_slot);
	__uint(max_entries, PREV_SLOTS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} maglev_prev SEC(".maps");

/* The fullnat flows made by another node (FLOW_FOREIGN_SOURCE), replicated here: client flow ->
 * the source that node translated it to, which this node keeps for them (LRU). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct flow_key);
	__type(value, struct flow_source);
	__uint(max_entries, FOREIGN_FLOWS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} flow_sources SEC(".maps");

/* Per-service mid-flow packets without a flow that second chance sent to the previous table's
 * backend, by service id (per CPU). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, MAX_SERVICES);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} second_chances SEC(".maps");

/* Mode tunnel services' encapsulations, by service id (read for MODE_TUNNEL only). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct tunnel);
	__uint(max_entries, MAX_SERVICES);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} service_tunnels SEC(".maps");

/* Mode tunnel services' packet fates, by service id (per CPU). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct tunnel_counts);
	__uint(max_entries, MAX_SERVICES);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tunnel_stats SEC(".maps");

/* icmp.h adds icmp_scratch, the ICMP error path's per-CPU working space (unpinned, no state). */

#endif
