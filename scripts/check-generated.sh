#!/usr/bin/env bash
# Fails when the committed BPF objects and Go bindings differ from what bpf/ compiles to.
set -euo pipefail
pkg=internal/datapath/ebpf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r "$pkg"/. "$tmp"/
(cd "$pkg" && go generate .)
stale=0
for f in "$pkg"/sluice_bpfel.go "$pkg"/sluice_bpfel.o; do
	if ! cmp -s "$f" "$tmp/$(basename "$f")"; then
		echo "stale: $f differs from what bpf/ compiles to; run make generate and commit it" >&2
		stale=1
	fi
done
# Leave the tree as it was: the check must not edit the checkout it checks.
cp "$tmp"/sluice_bpfel.go "$tmp"/sluice_bpfel.o "$pkg"/
exit $stale
