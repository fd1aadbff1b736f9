"""The GPU run's short text summary, from the JSON files `run.sh` left in a directory.

    python -m benchmarks.gpu.summary DIR    # reads measure.json, scaleout.json, notes.txt; writes summary.txt
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _pct(x: float) -> str:
    return f"{100 * x:.3f}%"


def measure_lines(m: dict[str, Any]) -> list[str]:
    machine, nvml, steps = m["machine"], m["nvml"], m["steps"]
    what = "CPU DRY RUN (no GPU: figures test the code, not a device)" if m["cpu_dry_run"] else \
        f"{machine.get('gpu')} x{machine.get('gpu_count')}, {machine.get('gpu_memory_gb')} GB"
    lines = [f"device: {what}; torch {machine['torch']} (CUDA {machine['cuda']}); {machine['cores']} cores, "
             f"load {machine['load_average']:.1f}"]
    if nvml["nvml_ok"]:
        lines.append(f"NVML collector: {nvml['nvml_ok']}/{nvml['samples']} samples observed, {nvml['gpus']} GPU(s), "
                     f"{nvml['xids']} XIDs; first collect {nvml['first_collect_ms']} ms, then p50 "
                     f"{nvml['collect_ms']['p50']} ms, p99 {nvml['collect_ms']['p99']} ms")
    else:
        lines.append(f"NVML collector: node unobserved ({nvml['error']}); collect p50 {nvml['collect_ms']['p50']} ms")
    model = steps["model"]
    params = f"{model['params'] / 1e6:,.0f} M" if model["params"] >= 1e6 else f"{model['params']:,}"
    lines.append(f"training loop: {params} params, checkpointed state {model['state_mb']:,.1f} MB "
                 f"in {model['state_tensors']} tensors, {steps['tokens_per_step']} tokens/step, base step "
                 f"{steps['base_step_s'] * 1e3:.1f} ms; slots in {steps['slots']}, "
                 f"page-locked: {steps['slots_pinned']}")
    for mode in ("hook", "ckpt", "hook+ckpt"):
        r = steps["modes"][mode]
        lines.append(f"  {mode:9s} overhead {_pct(r['overhead_by_direct_timing'])} of a step by direct timing "
                     f"({_pct(r['overhead_by_difference'])} by difference of means); hook "
                     f"{r['hook_s_per_step'] * 1e3:.3f} ms/step, checkpoint blocked "
                     f"{r['ckpt_blocked_s_per_step'] * 1e3:.2f} ms/step (queue {r['ckpt_launch_s_per_step'] * 1e3:.2f}"
                     f" + wait {r['ckpt_wait_s_per_step'] * 1e3:.2f}); {r['snapshots']} snapshots in {r['steps']} "
                     f"steps, {r['snapshots_skipped']} skipped (slots busy)")
    t = steps["targets"]
    lines.append(f"targets: checkpoint blocking <= 0.04 s/step: {t['ckpt_blocked_s_per_step_le_0.04']}; hook + "
                 f"checkpoint <= 0.5% of a step: {t['hook_plus_ckpt_le_0.5pct_of_a_step']}")
    return lines


def scaleout_lines(s: dict[str, Any]) -> list[str]:
    lines = [f"scale-out: {s['cores']} cores, {s['shared_cores']} shared, broker pinned: {s['broker_pinned']}, "
             f"{s['partitions']} partitions, load {s['load_average']:.1f}"]
    first = s["runs"][0] if s["runs"] else None
    for r in s["runs"]:
        ratio = r["events_per_s"] / first["events_per_s"] if first else 0.0
        lines.append(f"  {r['workers']} worker(s) {'a core each' if r['dedicated'] else 'SHARED cores'}: "
                     f"{r['events_per_s']:,} events/s ({ratio:.2f}x), {r['events_per_cpu_s']:,} per worker CPU-s")
    lines += [f"  {line}" for line in s["not_measured"]]
    if s.get("takeover_s") is not None:
        lines.append(f"  takeover after SIGKILL: {s['takeover_s']:.1f} s")
    return lines


def summarize(directory: Path) -> str:
    lines: list[str] = []
    for name, render in (("measure.json", measure_lines), ("scaleout.json", scaleout_lines)):
        path = directory / name
        if path.is_file():
            lines += render(json.loads(path.read_text()))
        else:
            lines.append(f"{name}: missing (see notes)")
    notes = directory / "notes.txt"
    if notes.is_file():
        lines += [f"note: {line}" for line in notes.read_text().splitlines() if line.strip()]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or not Path(args[0]).is_dir():
        print("usage: python -m benchmarks.gpu.summary DIR (a directory run.sh wrote)", file=sys.stderr)
        return 2
    text = summarize(Path(args[0]))
    (Path(args[0]) / "summary.txt").write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
