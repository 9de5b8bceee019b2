"""The per-op roofline of a PyTorch trace next to Nsight Compute's measurements of the same kernels,
when both are inputs of one run (diagnoser.runs.merge).

Matching, launch by launch: the trace's roofline gives one steady step's kernels of its ops in GPU
order (timeline/roofline.py `_step_kernels`: op row, name, grid, block; the timeline result's table
`tables.roofline_kernels`, result_tables.StepKernel); the ncu report's launches
come in launch order. Each launch is matched to the next kernel of the step, going round the step
(ncu may start anywhere in it), with the same name stem (no scopes, template arguments or
parameters: the tools spell those differently, `(cudnnKernelDataType_t)0` vs `0`) and the same
grid and block; the launch order tells apart the calls of one kernel (a persistent GEMM runs with
grid = SM count at every shape). A launch no kernel of the step matches is left out.

Per op row, over its matched launches: ncu's achieved TFLOP/s (kernel_flop_count) and DRAM TB/s
(dram_bytes) over their duration, the time-weighted SM and DRAM throughput (% of peak), and the
bound ncu's measured intensity (FLOPs per DRAM byte) puts the op on, against the trace's ridge
(compute roof / bandwidth). The bound ncu measured decides (it counts the bytes that crossed DRAM,
the trace only the compulsory ones) where ncu matched every kernel of one call of the op; the
trace's bound stands otherwise. The % differences are the trace's against ncu's.
"""
from __future__ import annotations

import bisect

from ..kernel_names import MATCH_KEY, short_name
from .grouping import ncu_launches

WORK = ("kernel_flop_count", "dram_bytes", "kernel_duration_us", "sm_throughput_pct", "dram_throughput_pct")


def _stem(name) -> str:
    """A kernel's name as every tool spells it: the function's own name, nothing around it."""
    key = short_name(name, MATCH_KEY)
    return key.split("<")[0].split("(")[0]


def _work(result) -> dict[str, dict]:
    """launch id -> {fact: value} of the WORK facts."""
    out: dict[str, dict] = {}
    for f in result.facts:
        if f.subject is not None and f.subject.kind == "kernel" and f.name in WORK:
            out.setdefault(f.subject.id, {})[f.name] = float(f.value)
    return out


def match_launches(step: list, launches: list[dict]) -> list[tuple[dict, int]]:
    """[(ncu launch, position in `step`)] for the launches some kernel of the step matches, in order."""
    where: dict[tuple, list[int]] = {}
    for i, k in enumerate(step):
        where.setdefault((_stem(k.name), k.grid, k.block), []).append(i)
    out, at = [], 0
    for launch in launches:
        pos = where.get((_stem(launch.get("name")), launch.get("grid"), launch.get("block")))
        if not pos:
            continue
        j = bisect.bisect_left(pos, at)
        i = pos[j] if j < len(pos) else pos[0]  # past the step's last: round to the next step
        out.append((launch, i))
        at = i + 1
    return out


def _pct_diff(mine, theirs):
    return None if mine is None or not theirs else 100.0 * (mine - theirs) / theirs


def side_by_side(timeline, kernels) -> list[dict]:
    """Per roofline row with a matched launch: the trace's numbers and ncu's, their % differences and the
    bound with the source that decided it. `timeline`, `kernels`: AnalysisResults of one run."""
    rows = timeline.tables.roofline or []
    step = timeline.tables.roofline_kernels or []
    if not rows or not step:
        return []
    launches = sorted(ncu_launches(kernels), key=lambda l: int(l["id"]) if str(l["id"]).isdigit() else 0)
    work = _work(kernels)
    per_row: dict[int, list] = {}
    for launch, i in match_launches(step, launches):
        if step[i].row >= 0:
            per_row.setdefault(step[i].row, []).append((launch, step[i], i))
    out = []
    for n, r in enumerate(rows):
        hits = per_row.get(n)
        if not hits:
            continue
        per_call = sum(1 for k in step if k.row == n) / max(r.calls_per_step or 1.0, 1e-9)
        ws = [work.get(l["id"], {}) for l, _, _ in hits]
        us = sum(w.get("kernel_duration_us", 0.0) for w in ws)
        flops = [w["kernel_flop_count"] for w in ws if "kernel_flop_count" in w]
        nbytes = [w["dram_bytes"] for w in ws if "dram_bytes" in w]
        tflops = sum(flops) / us / 1e6 if us and len(flops) == len(ws) else None
        tbs = sum(nbytes) / us / 1e6 if us and len(nbytes) == len(ws) else None

        def weighted(name):
            got = [(w[name], w.get("kernel_duration_us", 0.0)) for w in ws if name in w]
            t = sum(d for _, d in got)
            return sum(v * d for v, d in got) / t if got and t else None

        ridge = (r.compute_roof_tflops / r.memory_roof_tbs if r.compute_roof_tflops and r.memory_roof_tbs else None)
        ncu_bound = ""
        if ridge is not None and tflops is not None and tbs is not None and (tflops or tbs):
            ncu_bound = "compute" if tflops > ridge * tbs else "memory"
        whole = len({i for _, _, i in hits}) >= per_call  # every kernel of one call of the op profiled
        decided = "ncu" if ncu_bound and whole else "trace"
        out.append({"op": r.op, "shapes": r.shapes, "dtype": r.dtype,
                    "kernels": [k.name for _, k, _ in hits],
                    "launches": [str(l["id"]) for l, _, _ in hits],
                    "kernels_per_call": per_call, "kernels_matched": len({i for _, _, i in hits}),
                    "trace_us_per_call": 1e3 * r.gpu_ms_per_step / max(r.calls_per_step, 1e-9),
                    "ncu_us": us, "trace_tflops": r.tflops, "ncu_tflops": tflops,
                    "tflops_diff_pct": _pct_diff(r.tflops, tflops), "trace_tbs": r.tbs, "ncu_dram_tbs": tbs,
                    "tbs_diff_pct": _pct_diff(r.tbs, tbs), "ncu_sm_pct": weighted("sm_throughput_pct"),
                    "ncu_dram_pct": weighted("dram_throughput_pct"), "trace_bound": r.bound or "",
                    "ncu_bound": ncu_bound, "bound": ncu_bound if decided == "ncu" else (r.bound or ""),
                    "bound_from": decided})
    return out
