// Package ebpf is Sluice's eBPF datapath: a tc (tcx) or XDP program that looks flows up in its own
// connection table, picks new flows' backends from Maglev tables built in Go and forwards them
// rewritten for nat, fullnat or dsr with bpf_fib_lookup and bpf_redirect(_neigh), bypassing
// netfilter; maps and links are pinned under /sys/fs/bpf/sluice so flows outlive the daemon.
package ebpf
