#!/usr/bin/env bash
# Fails when the project's BPF C (bpf/*.c, bpf/*.h; not the vendored bpf/include) differs from
# what clang-format-14 makes of it with .clang-format; --fix rewrites the files instead.
set -euo pipefail
cd "$(dirname "$0")/.."
cf=clang-format-14
if ! command -v "$cf" >/dev/null; then
	echo "check-format: no $cf; scripts/deps.sh installs it" >&2
	exit 1
fi
files=(bpf/*.c bpf/*.h)
if [ "${1:-}" = --fix ]; then
	exec "$cf" -i "${files[@]}"
fi
"$cf" --dry-run --Werror "${files[@]}" || {
	echo "check-format: run scripts/check-format.sh --fix, then make generate, and commit both" >&2
	exit 1
}
