#!/usr/bin/env bash
# Install valgrind from Debian, once (benchmarks/bench_instructions.py counts instructions with its cachegrind).
# Idempotent: does nothing when valgrind is already there.
set -euo pipefail
command -v valgrind >/dev/null && exit 0
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
# Wait for a concurrent apt/dpkg (other installers on a shared machine).
for _ in $(seq 1 60); do
  $SUDO apt-get install -y -q --no-install-recommends valgrind >/tmp/valgrind-install.$$.log 2>&1 && exit 0
  if grep -q "Unable to locate package\|has no installation candidate" /tmp/valgrind-install.$$.log; then
    $SUDO apt-get update -q >/dev/null 2>&1 || true
  fi
  sleep 5
done
cat /tmp/valgrind-install.$$.log >&2
echo "tools/valgrind-install.sh: could not install valgrind via apt" >&2
exit 2
