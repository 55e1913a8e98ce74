#!/usr/bin/env bash
# Installs what Sluice's build, tests and demo need on a fresh Debian machine (idempotent).
set -euo pipefail
need=()
for pair in clang:clang llvm-strip:llvm /usr/include/bpf/bpf_helpers.h:libbpf-dev /usr/include/x86_64-linux-gnu/asm/types.h:linux-libc-dev nft:nftables nginx:nginx-light wrk:wrk /usr/lib/nginx/modules/ngx_http_echo_module.so:libnginx-mod-http-echo curl:curl ip:iproute2 conntrack:conntrack hping3:hping3; do
	command -v "${pair%%:*}" >/dev/null 2>&1 || [ -x "/usr/sbin/${pair%%:*}" ] || [ -e "${pair%%:*}" ] || need+=("${pair#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "deps: missing ${need[*]} and not root: install them or run as root" >&2
		exit 1
	fi
	echo "deps: installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
	# nginx-light's package starts a system nginx on :80 in the root namespace; the lab runs its own.
	systemctl disable --now nginx >/dev/null 2>&1 || service nginx stop >/dev/null 2>&1 || true
fi
go mod download
