#!/usr/bin/env bash
# Build helm from its Go module once, into a gitignored cache (.tools/), so
# chart tests render with the real helm. Idempotent: a second run is a no-op.
set -euo pipefail
HELM_VERSION="${HELM_VERSION:-v3.22.0}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="$ROOT/.tools"
BIN="$CACHE/bin/helm"
STAMP="$CACHE/helm-${HELM_VERSION}.built"
if [ -x "$BIN" ] && [ -f "$STAMP" ]; then
  exit 0
fi
command -v go >/dev/null || { echo "tools/helm.sh: go is not installed (needed to build helm $HELM_VERSION)" >&2; exit 2; }
mkdir -p "$CACHE/bin"
export GOPATH="$CACHE/go" GOBIN="$CACHE/bin" GOFLAGS=-modcacherw GOTOOLCHAIN=local
# Use one core so the build does not starve a shared machine.
GOMAXPROCS="${GOMAXPROCS:-1}" nice go install -p 1 "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
"$BIN" version --short >/dev/null
touch "$STAMP"
