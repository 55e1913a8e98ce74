package ebpf

// The BPF objects and their Go bindings are generated from bpf/ and committed; `make generate`
// rebuilds them and CI fails when they are stale. The compiler is pinned (clang-14, Debian 12's,
// installed by scripts/deps.sh) so that the committed objects are reproducible byte for byte, and
// the libbpf and asm headers come from bpf/include, not the host.
//go:generate sh -c "command -v clang-14 >/dev/null || { echo 'make generate: clang-14 not found; scripts/deps.sh installs it' >&2; exit 1; }"
//go:generate go tool bpf2go -cc clang-14 -cflags "-O2 -g -Wall -Werror" -target bpfel -type vip_key -type service -type backend -type flow_key -type flow -type reverse -type stats -type globals -type if_mac -type mode -type fallback -type service_flags -type service_source -type backend_flags -type flow_flags -type service_settings -type backend_settings -type conn_counts -type persist_key -type persist_entry -type source_key -type source_lists -type client_key -type client_state -type limit_action -type refusals -type unforwarded -type prev_slot -type tunnel -type tunnel_kind -type tunnel_counts -type flow_source sluice ../../../bpf/sluice.bpf.c -- -I../../../bpf/include -I../../../bpf
//
// The backend side's decapsulation program (sluice decap) is generated here too, into its package,
// so that make generate and scripts/check-generated.sh cover it.
//go:generate go tool bpf2go -cc clang-14 -cflags "-O2 -g -Wall -Werror" -target bpfel -output-dir ../../decap -go-package decap -type local_key -type decap_settings -type decap_counts decap ../../../bpf/decap.bpf.c -- -I../../../bpf/include -I../../../bpf
