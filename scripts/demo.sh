#!/usr/bin/env bash
# The Sluice demo: a lab of namespaces (client, balancer, three nginx backends), real HTTP traffic
# to a VIP balanced by the nftables rules Sluice generates, then the lab is torn down.
set -euo pipefail
cd "$(dirname "$0")/.."
S=./bin/sluice
L=./bin/sluice-lab # the lab (make build builds it beside sluice)
P=sluice-demo
LB=$P-lb
CLIENT=$P-client
DURATION=${DURATION:-5}
trap '$L down --prefix $P >/dev/null 2>&1 || true' EXIT

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
inclient() { ip netns exec "$CLIENT" "$@"; }
rps() { awk '/Requests\/sec/ {print $2}'; }
# wrk3 runs three wrk processes at once (one per target, 1 thread and 16 connections each) and
# prints the summed requests/s: the same load shape for the direct baseline and the VIP.
wrk3() {
	local t out=() i=0
	for t in "$@"; do
		inclient wrk -t1 -c16 -d"${DURATION}s" "${WRK_ARGS[@]}" "$t" >"/tmp/$P-wrk-$i" 2>&1 &
		i=$((i + 1))
	done
	wait
	for ((j = 0; j < i; j++)); do out+=("$(rps <"/tmp/$P-wrk-$j")"); rm -f "/tmp/$P-wrk-$j"; done
	printf '%s\n' "${out[@]}" | awk '{s += $1} END {printf "%.0f", s}'
}

step "lab up (namespaces $P-*)"
$L up --prefix $P

step "apply examples/lab-nat.yaml in $LB"
cat examples/lab-nat.yaml | grep -v '^#'
$S --netns $LB apply -f examples/lab-nat.yaml

step "ten requests from the client to http://10.91.9.100/"
for i in $(seq 10); do inclient curl -s --max-time 2 http://10.91.9.100/; done | sort | uniq -c

step "keep-alive requests/s for ${DURATION}s: direct to the backends, spread by routing, through the VIP"
# direct: each wrk thread to one backend, routed through the balancer with no balancing.
# ecmp: every thread to 10.91.8.1, which the balancer routes to all backends by a multipath route
# hashed on the 5-tuple: no balancer, but connections spread over the backends as through a VIP,
# which alone costs ~20% on a 2-CPU box (docs/BENCHMARKS.md).
WRK_ARGS=()
direct=$(wrk3 http://10.91.2.11/ http://10.91.2.12/ http://10.91.2.13/)
ecmp=$(wrk3 http://10.91.8.1/ http://10.91.8.1/ http://10.91.8.1/)
vip=$(wrk3 http://10.91.9.100/ http://10.91.9.100/ http://10.91.9.100/)
awk -v d="$direct" -v e="$ecmp" -v v="$vip" 'BEGIN {printf "direct %8d req/s\necmp   %8d req/s  (%.0f%% of direct)\nvip    %8d req/s  (%.0f%% of direct, %.0f%% of ecmp)\n", d, e, 100 * e / d, v, 100 * v / d, 100 * v / e}'

step "one request per connection for ${DURATION}s: direct vs VIP"
# Each phase gets its own client port range: a backend still holding a direct connection's 4-tuple
# in TIME_WAIT would meet the VIP flow's SYN (another ISN) with a stale ACK and stall it.
WRK_ARGS=(-H "Connection: close")
inclient sysctl -qw net.ipv4.ip_local_port_range="20000 40000"
direct=$(wrk3 http://10.91.2.11/ http://10.91.2.12/ http://10.91.2.13/)
inclient sysctl -qw net.ipv4.ip_local_port_range="40001 60999"
$S --netns $LB flush && $S --netns $LB apply -f examples/lab-nat.yaml >/dev/null # fresh counters
vip=$(wrk3 http://10.91.9.100/ http://10.91.9.100/ http://10.91.9.100/)
awk -v d="$direct" -v v="$vip" 'BEGIN {printf "direct %8d conn/s\nvip    %8d conn/s  (%.0f%% of direct)\n", d, v, 100 * v / d}'

step "sluice list: connections per backend from the kernel counters"
$S --netns $LB list -n

step "lab down"
