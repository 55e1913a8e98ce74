#!/usr/bin/env bash
# Installs the Debian packages and Go modules that Sluice's build, lab, tests and demo need on a
# fresh Debian machine (idempotent). The pinned linter is not among them: make lint (and so make
# test) installs it with scripts/tools.sh, so make demo builds no linter.
set -euo pipefail
need=()
for pair in clang-14:clang-14 llvm-strip-14:llvm-14 clang-format-14:clang-format-14 /usr/include/linux/bpf.h:linux-libc-dev nft:nftables nginx:nginx-light wrk:wrk /usr/lib/nginx/modules/ngx_http_echo_module.so:libnginx-mod-http-echo curl:curl ip:iproute2 conntrack:conntrack conntrackd:conntrackd hping3:hping3 bird:bird2 keepalived:keepalived trafgen:netsniff-ng iptables:iptables; do
	command -v "${pair%%:*}" >/dev/null 2>&1 || [ -x "/usr/sbin/${pair%%:*}" ] || [ -e "${pair%%:*}" ] || need+=("${pair#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "deps: missing ${need[*]} and not root: install them or run as root" >&2
		exit 1
	fi
	echo "deps: installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	# The packages must not start services on the host (nginx-light would start a system nginx on
	# :80; the lab runs its own in namespaces): a policy-rc.d answering 101 forbids that for the
	# install's duration, as in Debian's chroots.
	policy=/usr/sbin/policy-rc.d
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy"
		chmod 755 "$policy"
		trap 'rm -f "$policy"' EXIT
	fi
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
go mod download
