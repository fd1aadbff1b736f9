#!/usr/bin/env bash
# Wheels for `run.sh` on an offline GPU machine whose Python has torch but not what the step part imports
# (msgspec, pydantic and theirs): the versions this checkout's .venv holds, built for the target's Python
# (default 3.12) on x86-64 Linux, into DIR (default .whl at the repository root, which run.sh installs
# from; it is gitignored). About 3 MB. The scale-out part needs the worker's whole dependency tree
# (pyproject.toml) and a broker, which this does not bring.
#   benchmarks/gpu/fetch_wheels.sh [PYTHON_VERSION [DIR]]
set -euo pipefail
cd "${0%/*}/../.."
PYV="${1:-3.12}"
DIR="${2:-.whl}"
PY=.venv/bin/python
[ -x "$PY" ] || { echo "fetch_wheels.sh: no .venv here (make install first)" >&2; exit 2; }
read -r -a pins < <("$PY" -c 'from importlib.metadata import version as v
print(" ".join(f"{n}=={v(n)}" for n in ("msgspec", "pydantic", "pydantic-core", "annotated-types",
                                         "typing-inspection", "typing-extensions")))')
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$PYV" --implementation cp \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
  -d "$DIR" "${pins[@]}"
ls "$DIR"
