// Package ebpf is Sluice's eBPF datapath: a tc (tcx) or XDP program that looks flows up in its own
// connection table, picks new flows' backends from Maglev tables built in Go and forwards them
// rewritten for nat, fullnat or dsr with bpf_fib_lookup and bpf_redirect(_neigh), bypassing
// netfilter; maps and links are pinned under /sys/fs/bpf/sluice so flows outlive the daemon.
//
// The loader (New, Apply) keeps the program's maps in step with the plan, in place:
//
//   - Ids. Each service (by name) has a service id and each of its backends (by address and port)
//     a backend id, lowest free first. They are recorded with names, weights and rings in two maps
//     of Sluice's own, service_meta and backend_meta, so that a restart, `sluice list` and Resync
//     rebuild everything from the pins.
//   - Rings. Every service's Maglev table is a range of the one maglev array, allocated first fit;
//     a table keeps its range while its size stays (only changed slots are written) and moves to a
//     new range, switched to by its vips entries, when it does not.
//   - Order. Backends are written before the slots that refer to them, slots before the vips
//     entries that refer to them. A backend or service that leaves the plan is retired: it takes no
//     new flow but stays valid for its established ones (as conntrack keeps them for the nft
//     datapath), until a read-back Apply (Resync, restart) finds its flows idle for the service's
//     flow timeout; then its flows, entry and id are freed.
//   - Limits. The maps have the sizes of bpf/constants.h (65536 vips entries, one per service
//     port; 16384 services; 131072 backends, counted per service; 2^24 Maglev slots; 2^20
//     flows). Pinned maps are reused only at the same size, so they are not resized: a plan that
//     does not fit is refused before anything is written.
package ebpf
