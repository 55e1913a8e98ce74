package ebpf

// The BPF objects and their Go bindings are generated from bpf/ and committed; `make generate`
// rebuilds them and CI fails when they are stale.
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type vip_key -type service -type backend -type flow_key -type flow -type reverse -type stats -type globals -type if_mac sluice ../../../bpf/sluice.bpf.c -- -I/usr/include/x86_64-linux-gnu -I../../../bpf
