#!/usr/bin/env bash
# The GPU run (issue 23, item 7), at most 8 minutes, on a machine with an NVIDIA GPU:
#   0. the GPU test tier (tests/gpu), where pytest is installed;
#   1. the NVML collector against the real device (collectors.nvml, real pynvml);
#   2. the training hook and the every-step checkpoint, per step, with CUDA tensors (a side stream into
#      page-locked slots), against the same loop uninstrumented (benchmarks/gpu/step_overhead.py);
#   3. the scale-out benchmark on the machine's cores (benchmarks/bench_scaleout.py: 1, 2, 4, 8 workers,
#      a core each), when a Kafka broker answers on 127.0.0.1:9092 or one can be started here.
# Figures go to $OUT when set, else out/gpu: measure.json, scaleout.json, summary.txt, notes.txt and logs.
#
# Without a GPU it stops at once: one line on stderr, exit code 2. `run.sh --cpu` is the dry run: the same
# steps on the CPU (a small model, one scale-out run), to test the script and the code where no GPU is
# (tests/e2e/test_gpu_run_dry.py runs it); its figures say nothing about a GPU.
#
# An offline machine: the Python packages it lacks can come as wheels in $TRAINGUARD_WHEELS (or .whl/ at
# the repository root), installed with pip --no-index into a temporary directory; the step part needs
# msgspec, pydantic (+ pydantic-core, annotated-types, typing-inspection) and nvidia-ml-py beside torch
# (`benchmarks/gpu/fetch_wheels.sh` downloads the first ones, where a registry is reachable);
# the scale-out part also needs the worker's dependencies (pyproject.toml) and, to start a broker, java 17
# with the broker jars in .trainguard/kafka-lib (`make broker-start` fetches them where Maven Central is
# reachable).
set -uo pipefail
cd "${0%/*}/../.." || exit 2  # no dirname: the no-GPU check must run with an empty PATH
OUT_DIR="${OUT:-out/gpu}"
if [ -n "${PYTHON:-}" ]; then PY="$PYTHON"; elif [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fail() { echo "benchmarks/gpu/run.sh: $*" >&2; exit 2; }
note() { echo "$*" | tee -a "$OUT_DIR/notes.txt" >&2; }
left() { echo $((480 - SECONDS)); }  # seconds left of the 8 minutes
CPU=""
case "${1:-}" in
  --cpu) CPU=1 ;;
  "") ;;
  *) fail "unknown argument $1 (usage: run.sh [--cpu])" ;;
esac

if [ -z "$CPU" ]; then
  command -v nvidia-smi >/dev/null 2>&1 || fail "no NVIDIA GPU here (nvidia-smi not found); nothing to measure"
  nvidia-smi -L >/dev/null 2>&1 || fail "no NVIDIA GPU here (nvidia-smi -L fails); nothing to measure"
fi

WHEELS="${TRAINGUARD_WHEELS:-.whl}"
if compgen -G "$WHEELS/*.whl" >/dev/null; then
  SITE="$(mktemp -d)"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$WHEELS"/*.whl \
    || fail "could not install the wheels in $WHEELS"
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
missing="$("$PY" -c 'import importlib.util as u; print(" ".join(m for m in ("torch", "msgspec", "pydantic", "pynvml", "yaml") if u.find_spec(m) is None))')" \
  || fail "$PY does not run"
[ -z "$missing" ] || fail "python modules missing: $missing (bring them as wheels in \$TRAINGUARD_WHEELS)"
[ -n "$CPU" ] || "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' \
  || fail "nvidia-smi sees a GPU but torch does not (torch built without CUDA, or a driver mismatch)"

mkdir -p "$OUT_DIR" && : > "$OUT_DIR/notes.txt"
export PYTHONUNBUFFERED=1

# 0: the GPU test tier (tests/gpu: NVML, the hook and the checkpoint on the device), at most 90 s, where pytest is
if [ -z "$CPU" ] && "$PY" -c 'import pytest' 2>/dev/null; then
  timeout 90 "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/gpu > "$OUT_DIR/gpu-tests.log" 2>&1 \
    || note "gpu tests: exit code $? (see gpu-tests.log)"
fi

# 1 + 2: NVML and the step overhead, at most 4 minutes
timeout 240 "$PY" -m benchmarks.gpu.measure --out "$OUT_DIR" ${CPU:+--cpu} > "$OUT_DIR/measure.log" 2>&1 \
  || note "measure: exit code $? (240 s limit; see measure.log)"

# 3: scale-out with what is left, when a broker answers or can be started
STARTED=""
BROKER_PID=""
SCALE=""
if ! "$PY" -c 'import importlib.util as u, sys; sys.exit(any(u.find_spec(m) is None for m in ("faust", "aiokafka", "kafka")))'; then
  note "scale-out not measured: the worker's dependencies (faust-streaming, aiokafka, kafka-python) are missing"
elif (exec 3<>/dev/tcp/127.0.0.1/9092) 2>/dev/null; then
  SCALE=1
  [ -f .trainguard/broker.pid ] && BROKER_PID="$(cat .trainguard/broker.pid)"
elif command -v java >/dev/null 2>&1 && [ -d .trainguard/kafka-lib ]; then
  if timeout 90 "$PY" -m trainguard.cli broker start --fresh > "$OUT_DIR/broker.log" 2>&1; then
    SCALE=1 STARTED=1 BROKER_PID="$(cat .trainguard/broker.pid)"
  else
    note "scale-out not measured: the local broker did not start (see broker.log)"
  fi
else
  note "scale-out not measured: no Kafka broker on 127.0.0.1:9092, and none can start here (needs java 17 and .trainguard/kafka-lib)"
fi
budget=$(( $(left) - 30 ))
if [ -n "$SCALE" ] && [ "$budget" -lt 60 ]; then
  note "scale-out not measured: only $(left) s of the 8 minutes left"
elif [ -n "$SCALE" ]; then
  if [ -n "$CPU" ]; then SIZE=(--events-per-worker 20000 --nodes 64 --workers 1 --no-takeover --oversubscribe)
  else SIZE=(--events-per-worker 100000); fi
  timeout "$budget" "$PY" -m benchmarks.bench_scaleout "${SIZE[@]}" --json "$OUT_DIR/scaleout.json" \
    ${BROKER_PID:+--broker-pid "$BROKER_PID"} > "$OUT_DIR/scaleout.log" 2>&1 \
    || note "scale-out: exit code $? (${budget} s limit; see scaleout.log)"
fi
[ -n "$STARTED" ] && "$PY" -m trainguard.cli broker stop >> "$OUT_DIR/broker.log" 2>&1

"$PY" -m benchmarks.gpu.summary "$OUT_DIR"
echo "took ${SECONDS} s; figures in $OUT_DIR"
