#!/usr/bin/env bash
# Install Slurm (slurmctld, slurmd, client tools) and munge from Debian, once.
# Idempotent: does nothing when the binaries are already there.
set -euo pipefail
need=0
for b in slurmctld slurmd scontrol sbatch munged; do command -v "$b" >/dev/null || need=1; done
[ "$need" = 0 ] && exit 0
exec "$(dirname "$0")/apt-install.sh" slurm-wlm munge
