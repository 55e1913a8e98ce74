#!/usr/bin/env bash
# Installs the pinned Go tools the build uses into bin/tools (idempotent: only a missing or
# different version is fetched, through the Go module proxy).
set -euo pipefail
cd "$(dirname "$0")/.."
GOLANGCI_LINT_VERSION=v2.15.0
tools="$PWD/bin/tools"
lint="$tools/golangci-lint"
# A linter built by another Go than the one building Sluice cannot read its standard library.
if ! [ -x "$lint" ] || ! "$lint" version --short 2>/dev/null | grep -qx "${GOLANGCI_LINT_VERSION#v}" ||
	[ "$(go version "$lint" | awk '{print $2}')" != "$(go env GOVERSION)" ]; then
	echo "tools: installing golangci-lint $GOLANGCI_LINT_VERSION with $(go env GOVERSION)"
	GOBIN="$tools" go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$GOLANGCI_LINT_VERSION"
fi
