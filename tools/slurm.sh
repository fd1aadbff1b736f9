#!/usr/bin/env bash
# A private single-host Slurm cluster for the integration tests: one slurmctld and N
# slurmd (`slurmd -N gnK`) on this machine, its own munged, everything (config, state,
# logs, pid files, munge socket) under DIR, ports from BASE_PORT. Needs root (slurmd
# runs jobs as their users) and tools/slurm-install.sh.
#
#   tools/slurm.sh start DIR [NODES=3] [BASE_PORT=17800]   # prints: export SLURM_CONF=DIR/slurm.conf
#   tools/slurm.sh stop DIR                                 # kills by the pid files only
set -euo pipefail
cmd="${1:?usage: slurm.sh start|stop DIR [NODES] [BASE_PORT]}"
DIR="$(mkdir -p "${2:?DIR}" && cd "$2" && pwd)"
NODES="${3:-3}"
BASE="${4:-17800}"

stop() {
  for pidfile in "$DIR"/slurmd-*.pid "$DIR"/slurmctld.pid "$DIR"/munged.pid; do
    [ -f "$pidfile" ] || continue
    pid="$(cat "$pidfile")"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$pidfile"
  done
}

if [ "$cmd" = stop ]; then stop; exit 0; fi
[ "$cmd" = start ] || { echo "slurm.sh: unknown command $cmd" >&2; exit 2; }
for b in slurmctld slurmd munged scontrol; do
  command -v "$b" >/dev/null || { echo "slurm.sh: $b not installed (run tools/slurm-install.sh)" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "slurm.sh: must run as root (slurmd starts jobs as their users)" >&2; exit 2; }

mkdir -p "$DIR/munge" "$DIR/state" "$DIR/spool"
# munge: a private key and socket, so it never touches a system munged.
if [ ! -f "$DIR/munge/munge.key" ]; then
  head -c 1024 /dev/urandom > "$DIR/munge/munge.key"
  chmod 400 "$DIR/munge/munge.key"
fi
munged --force --key-file="$DIR/munge/munge.key" --socket="$DIR/munge/munge.socket" \
  --pid-file="$DIR/munged.pid" --log-file="$DIR/munged.log" --seed-file="$DIR/munge/munge.seed"

last=$((BASE + NODES))
cat > "$DIR/slurm.conf" <<CONF
ClusterName=trainguard-test
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$BASE
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd-%n.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SlurmctldTimeout=30
SlurmdTimeout=30
# One host runs every daemon and the self-checks: allow for a loaded machine.
MessageTimeout=60
MinJobAge=300
${SLURM_EXTRA_CONF:-}
NodeName=gn[1-$NODES] NodeHostname=localhost NodeAddr=127.0.0.1 Port=[$((BASE + 1))-$last] CPUs=1 RealMemory=512 State=UNKNOWN
PartitionName=gpu Nodes=gn[1-$NODES] Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$DIR/slurm.conf"
slurmctld -i -f "$SLURM_CONF"
for i in $(seq 1 "$NODES"); do
  mkdir -p "$DIR/spool/gn$i"
  slurmd -N "gn$i" -f "$SLURM_CONF"
done
# Up = every node registered and responding (idle, or drained by a failing health check).
for _ in $(seq 1 600); do
  up="$(sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 !~ /[*~#!%]|unk|down/ {print $1}' | sort -u | wc -l)"
  [ "$up" -ge "$NODES" ] && { echo "export SLURM_CONF=$SLURM_CONF"; exit 0; }
  sleep 0.2
done
echo "slurm.sh: nodes did not come up in 120s; see $DIR/*.log" >&2
sinfo -N >&2 || true
exit 1
