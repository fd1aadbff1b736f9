#!/usr/bin/env bash
# Build helm from its Go module once per machine, into the user's cache
# ($XDG_CACHE_HOME/trainguard, like pip's), and link it as .tools/bin/helm
# (gitignored), so chart tests render with the real helm. A fresh clone on a
# machine that built it before only links it. Idempotent.
set -euo pipefail
HELM_VERSION="${HELM_VERSION:-v3.22.0}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${TRAINGUARD_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trainguard/helm-$HELM_VERSION}"
BIN="$CACHE/bin/helm"
STAMP="$CACHE/helm-${HELM_VERSION}.built"
LINK="$ROOT/.tools/bin/helm"
link() { mkdir -p "$(dirname "$LINK")" && ln -sfn "$BIN" "$LINK"; }
if [ -x "$BIN" ] && [ -f "$STAMP" ]; then
  link
  exit 0
fi
command -v go >/dev/null || { echo "tools/helm.sh: go is not installed (needed to build helm $HELM_VERSION)" >&2; exit 2; }
mkdir -p "$CACHE/bin"
export GOPATH="$CACHE/go" GOBIN="$CACHE/bin" GOFLAGS=-modcacherw GOTOOLCHAIN=local
# Use one core so the build does not starve a shared machine.
GOMAXPROCS="${GOMAXPROCS:-1}" nice go install -p 1 "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
"$BIN" version --short >/dev/null
touch "$STAMP"
link
