#!/usr/bin/env bash
# Runs each fuzz target for FUZZTIME, one after another: fuzz.sh PACKAGE:TARGET...
set -euo pipefail

GO=${GO:-go}
FUZZTIME=${FUZZTIME:-10s}
FUZZMINIMIZETIME=${FUZZMINIMIZETIME:-1s}

for spec in "$@"; do
	pkg=${spec%%:*} target=${spec#*:}
	cmd=("$GO" test -count=1 -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" -fuzzminimizetime "$FUZZMINIMIZETIME" "$pkg")
	echo "${cmd[*]}"
	"${cmd[@]}"
done
