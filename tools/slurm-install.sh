#!/usr/bin/env bash
# Install Slurm (slurmctld, slurmd, client tools) and munge from Debian, once.
# Idempotent: does nothing when the binaries are already there.
set -euo pipefail
need=0
for b in slurmctld slurmd scontrol sbatch munged; do command -v "$b" >/dev/null || need=1; done
[ "$need" = 0 ] && exit 0
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
# Wait for a concurrent apt/dpkg (other installers on a shared machine).
for _ in $(seq 1 60); do
  $SUDO apt-get install -y -q --no-install-recommends slurm-wlm munge >/tmp/slurm-install.$$.log 2>&1 && exit 0
  if grep -q "Unable to locate package\|has no installation candidate" /tmp/slurm-install.$$.log; then
    $SUDO apt-get update -q >/dev/null 2>&1 || true
  fi
  sleep 5
done
cat /tmp/slurm-install.$$.log >&2
echo "tools/slurm-install.sh: could not install slurm-wlm and munge via apt" >&2
exit 2
