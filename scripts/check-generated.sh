#!/usr/bin/env bash
# Fails when the committed BPF objects and Go bindings differ from what bpf/ compiles to. It
# generates into a scratch copy of the inputs, so the checkout is never edited, on any path.
set -euo pipefail
pkg=internal/datapath/ebpf
# The pinned compiler: gen.go names the binary, this the build the committed objects come from.
cc=$(sed -n 's/.*bpf2go -cc \([^ ]*\) .*/\1/p' "$pkg/gen.go" | head -1)
pinned="Debian clang version 14.0.6"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/$pkg" "$tmp/internal/decap"
cp -r go.mod go.sum bpf "$tmp"/
cp "$pkg/gen.go" "$tmp/$pkg/"
files=(sluice_bpfel.go sluice_bpfel.o ../../decap/decap_bpfel.go ../../decap/decap_bpfel.o)
if [ "$(command -v "$cc" >/dev/null && "$cc" --version | head -1)" != "$pinned" ]; then
	# Another compiler emits other bytes: compare the Go bindings, which depend only on the types.
	other=$(command -v "$cc" || command -v clang || true)
	if [ -z "$other" ]; then
		echo "check-generated: no $cc (nor clang) to compile bpf/ with; scripts/deps.sh installs it" >&2
		exit 1
	fi
	echo "check-generated: $cc is not \"$pinned\"; comparing the Go bindings only, built with $other" >&2
	sed -i "s|bpf2go -cc $cc |bpf2go -cc $other |; /command -v $cc/d" "$tmp/$pkg/gen.go"
	files=(sluice_bpfel.go ../../decap/decap_bpfel.go)
fi
(cd "$tmp/$pkg" && go generate . >/dev/null)
stale=0
for f in "${files[@]}"; do
	if ! cmp -s "$pkg/$f" "$tmp/$pkg/$f"; then
		echo "stale: $pkg/$f differs from what bpf/ compiles to; run make generate and commit it" >&2
		stale=1
	fi
done
exit $stale
