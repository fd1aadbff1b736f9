#!/usr/bin/env bash
# Install valgrind from Debian, once (benchmarks/bench_instructions.py counts instructions with its cachegrind).
# Idempotent: does nothing when valgrind is already there.
set -euo pipefail
command -v valgrind >/dev/null && exit 0
exec "$(dirname "$0")/apt-install.sh" valgrind
