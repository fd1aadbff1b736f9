#!/bin/sh
# trainguard health check for Slurm: run `trainguard selfcheck` on this node and drain it
# on failure; resume it when trainguard drained it and the check passes again.
#
# As HealthCheckProgram (slurm.conf):         As Prolog (slurm.conf, checks before every job):
#   HealthCheckProgram=/usr/local/sbin/trainguard-healthcheck.sh
#   HealthCheckInterval=300                    Prolog=/usr/local/sbin/trainguard-healthcheck.sh
#   HealthCheckNodeState=IDLE                  PrologFlags=Alloc
#
# slurmd runs it with an almost empty environment (SLURMD_NODENAME only), so settings come
# from a shell file: $TRAINGUARD_HEALTHCHECK_CONF, default /etc/default/trainguard-healthcheck:
#   TRAINGUARD_BIN=/opt/trainguard/bin/trainguard   the CLI (default: trainguard on PATH)
#   TRAINGUARD_HEALTHCHECK_CHECKS=dcgm,all_to_all   selfcheck stages (cheap ones: it runs often)
#   TRAINGUARD_HEALTHCHECK_TIMEOUT=30               collective timeout, seconds
#   SCONTROL=/usr/bin/scontrol, PATH=...
# A stage that fails on this node is a failure even when the selfcheck, which compares
# machines, names no culprit: a lone node has nothing to compare with.
# Exit: 0 healthy (or acted, as HealthCheckProgram); 1 unhealthy as Prolog, so Slurm also
# drains the node and requeues the job.
set -u
CONF="${TRAINGUARD_HEALTHCHECK_CONF:-/etc/default/trainguard-healthcheck}"
# shellcheck disable=SC1090
[ -r "$CONF" ] && . "$CONF"
PATH="${PATH:-/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin}"
export PATH
NODE="${SLURMD_NODENAME:-$(hostname -s)}"
TRAINGUARD="${TRAINGUARD_BIN:-trainguard}"
SCONTROL="${SCONTROL:-scontrol}"
CHECKS="${TRAINGUARD_HEALTHCHECK_CHECKS:-dcgm,all_to_all}"
TIMEOUT="${TRAINGUARD_HEALTHCHECK_TIMEOUT:-30}"

report="$("$TRAINGUARD" selfcheck --machines "$NODE" --checks "$CHECKS" --timeout "$TIMEOUT" 2>&1)"
rc=$?
failed_stage="$(printf '%s' "$report" | sed -n 's/.*"name": "\([a-z_]*\)", "status": "failed".*/\1/p' | head -n 1)"
if [ "$rc" -eq 2 ] || ! printf '%s' "$report" | grep -q '"passed"'; then
  failed_stage="selfcheck-error"   # could not run: a broken install is not a healthy node
elif [ "$rc" -ne 0 ] && [ -z "$failed_stage" ]; then
  failed_stage="$(printf '%s' "$report" | sed -n 's/.*"stage": "\([a-z_]*\)".*/\1/p' | head -n 1)"
  failed_stage="${failed_stage:-unknown}"
fi

if [ -n "$failed_stage" ]; then
  "$SCONTROL" update NodeName="$NODE" State=DRAIN Reason="trainguard selfcheck failed: $failed_stage"
  echo "trainguard-healthcheck: $NODE failed stage $failed_stage; drained" >&2
  [ -n "${SLURM_JOB_ID:-}" ] && exit 1
  exit 0
fi

# Passed: give back a node that trainguard (act or this check) drained; leave others' drains alone.
info="$("$SCONTROL" show node "$NODE" 2>/dev/null)"
if printf '%s' "$info" | grep -q "State=[A-Z+]*DRAIN" && printf '%s' "$info" | grep -q "Reason=trainguard"; then
  "$SCONTROL" update NodeName="$NODE" State=RESUME
  echo "trainguard-healthcheck: $NODE passed; resumed" >&2
fi
exit 0
