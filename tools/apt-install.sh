#!/usr/bin/env bash
# Install Debian packages with apt-get, waiting out a concurrent apt/dpkg (other installers on a shared
# machine) and refreshing the package lists once they turn out stale. The one apt loop of tools/*-install.sh.
# Usage: tools/apt-install.sh PACKAGE...; exit code 2 with apt's log when it cannot.
set -euo pipefail
[ "$#" -gt 0 ] || { echo "tools/apt-install.sh: name the packages to install" >&2; exit 2; }
SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "tools/apt-install.sh: need root (or sudo) to install $*" >&2; exit 2; }
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
log="$(mktemp /tmp/apt-install.XXXXXX.log)"
trap 'rm -f "$log"' EXIT
for _ in $(seq 1 60); do
  $SUDO apt-get install -y -q --no-install-recommends "$@" >"$log" 2>&1 && exit 0
  if grep -q "Unable to locate package\|has no installation candidate" "$log"; then
    $SUDO apt-get update -q >/dev/null 2>&1 || true
  fi
  sleep 5
done
cat "$log" >&2
echo "tools/apt-install.sh: could not install $* via apt" >&2
exit 2
