// SPDX-License-Identifier: GPL-2.0
/* Sluice eBPF datapath (placeholder until the fast path lands): passes everything. */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include "maps.h"

SEC("tc")
int sluice_tc(struct __sk_buff *skb)
{
	return TC_ACT_OK;
}

SEC("xdp")
int sluice_xdp(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
