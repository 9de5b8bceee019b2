"""Kernel analysis: Nsight Compute launches -> per-kernel Speed-of-Light facts (+ the SOL scatter).

Pure functions over `NcuReport` models (binary or CSV: same metric names, same base units). Each
fact is computed only from metrics that are present and finite; a report collected with
`--set basic` simply lacks the facts that need `--set full` metrics, so rules needing them are
listed as "not evaluated".
"""
from __future__ import annotations

import math
import re

from .. import settings
from ..facts import AnalysisResult, Fact, Subject
from ..kernel_names import (NOT_LIBRARIES, arch_from_kernel_names, arch_of_device, framework_from_kernel_names,
                            kernel_origin)
from .units import _num  # one reading of a metric value for both modules
from .units import access_waste_facts, cudnn_conv_gemm, pipe_facts, tensor_core_switch
from .achieved_work import launch_work
from .aten_ops import aten_op_of
from .shared_memory import shared_conflict_facts
from .sm_balance import sm_balance_facts

from .catalogue import CATALOGUE, READER

FULL_OCCUPANCY_PCT = settings.register(
    "kernel.full_occupancy_pct", 99.5, "%",
    "theoretical occupancy at or above this is full: occupancy_limiter is none (no resource limits it)")
SOL_HIGH_PCT = 60.0  # only for the chart's colouring; rules use their own params

M_DURATION = "gpu__time_duration.sum"
M_SM = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
M_MEM = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
M_DRAM = "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"
M_L1 = "l1tex__throughput.avg.pct_of_peak_sustained_active"
M_L2 = "lts__throughput.avg.pct_of_peak_sustained_elapsed"
M_ACH_OCC = "sm__warps_active.avg.pct_of_peak_sustained_active"
M_THEO_OCC = "sm__maximum_warps_per_active_cycle_pct"
M_TENSOR = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"
M_FMA = "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_elapsed"
M_FP64 = "sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_elapsed"
M_THREADS_PER_INST = "smsp__thread_inst_executed_per_inst_executed.ratio"
M_INST = "smsp__inst_executed.sum"
LIMITERS = (("registers", "launch__occupancy_limit_registers"),
            ("shared_memory", "launch__occupancy_limit_shared_mem"),
            ("block_size", "launch__occupancy_limit_warps"),
            ("blocks", "launch__occupancy_limit_blocks"))
STALL_RE = re.compile(r"^smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio$")




def _ratio(a: float | None, b: float | None, scale: float = 1.0) -> float | None:
    if a is None or b is None or b <= 0:
        return None
    r = a / b * scale
    return r if math.isfinite(r) else None


def _first_sentence(text: str, limit: int = 200) -> str:
    text = re.sub(r"@\w+:(\w+):([^@]*)@", r"\2", text)  # "@section:Id:Title@" -> "Title"
    m = re.match(r"(.+?[.!?])(\s|$)", text)
    s = (m.group(1) if m else text).strip()
    return s if len(s) <= limit else s[: limit - 1] + "\u2026"


def _ncu_verdict(launch) -> dict[str, object]:
    out: dict[str, object] = {}
    scored = [r for r in launch.rules if r.speedup_pct is not None and math.isfinite(r.speedup_pct)]
    if scored:
        top = max(scored, key=lambda r: (r.speedup_type == "global", r.speedup_pct, r.identifier))
        out["ncu_top_rule"] = top.identifier
        out["ncu_top_rule_speedup_pct"] = min(100.0, max(0.0, top.speedup_pct))
        out["ncu_top_rule_message"] = _first_sentence(top.text)
    sol = [r for r in launch.rules if r.identifier == "SOLBottleneck" and r.text]
    if sol:
        out["ncu_sol_verdict"] = _first_sentence(sol[0].text)
    return out


def _occupancy_limiter(m: dict, theoretical: float | None) -> str | None:
    limits = [(v, name) for name, metric in LIMITERS if (v := _num(m, metric)) is not None]
    if not limits:
        return None
    if theoretical is not None and theoretical >= FULL_OCCUPANCY_PCT.value:
        return "none"
    return min(limits)[1]


def _stall(m: dict) -> tuple[str, float] | None:
    stalls = {}
    for name, v in m.items():
        hit = STALL_RE.match(name)
        if hit and hit.group(1) != "selected" and isinstance(v, (int, float)) and math.isfinite(v) and v > 0:
            stalls[hit.group(1)] = float(v)
    total = sum(stalls.values())
    if not stalls or total <= 0:
        return None
    reason = max(sorted(stalls), key=lambda k: stalls[k])
    return reason, 100.0 * stalls[reason] / total


def _origin_facts(launch, neighbours) -> tuple[dict[str, object], str]:
    """Who wrote the kernel (a library, PyTorch, user code) and what that means for a fix."""
    f: dict[str, object] = {"kernel_name": launch.name, "kernel_base_name": launch.short_name}
    origin = kernel_origin(launch.name, launch.short_name)
    if cudnn_conv_gemm(neighbours[0], launch.name, neighbours[1], origin):
        origin = "cuDNN"
    lib = None if origin in NOT_LIBRARIES or origin == "user code" else origin
    f["is_library_kernel"] = lib is not None
    f["kernel_origin"] = origin
    f["tensor_core_switch"] = tensor_core_switch(origin)
    if lib:
        f["library_name"] = lib
    return f, origin


def _throughput_facts(m: dict, total_ns: float) -> dict[str, object]:
    """Duration, its share of the report, and the Speed-of-Light throughputs."""
    f: dict[str, object] = {}
    dur = _num(m, M_DURATION)
    if dur is not None:
        f["kernel_duration_us"] = dur / 1e3
        f["kernel_time_share_pct"] = _ratio(dur, total_ns, 100.0)
    sm, mem = _num(m, M_SM), _num(m, M_MEM)
    f["sm_throughput_pct"], f["memory_throughput_pct"] = sm, mem
    if sm is not None and mem is not None:
        f["sol_max_pct"] = max(sm, mem)
        f["sol_bound_side"] = "sm" if sm >= mem else "memory"
    f["dram_throughput_pct"] = _num(m, M_DRAM)
    f["l1_throughput_pct"] = _num(m, M_L1)
    f["l2_throughput_pct"] = _num(m, M_L2)
    return f


def _launch_shape_facts(m: dict, sm_count: float | None) -> dict[str, object]:
    """Occupancy and what limits it, the grid against the SMs, registers per thread."""
    f: dict[str, object] = {}
    ach, theo = _num(m, M_ACH_OCC), _num(m, M_THEO_OCC)
    f["achieved_occupancy_pct"], f["theoretical_occupancy_pct"] = ach, theo
    f["occupancy_achieved_of_theoretical_pct"] = _ratio(ach, theo, 100.0)
    f["occupancy_limiter"] = _occupancy_limiter(m, theo)
    f["waves_per_sm"] = _num(m, "launch__waves_per_multiprocessor")
    grid = _num(m, "launch__grid_size")
    f["grid_blocks_count"] = grid
    f["block_threads_count"] = _num(m, "launch__block_size")
    sms = _num(m, "launch__sm_count") or sm_count
    fill = _ratio(grid, sms, 100.0)
    f["grid_sm_fill_pct"] = min(100.0, fill) if fill is not None else None
    f["registers_per_thread_count"] = _num(m, "launch__registers_per_thread")
    return f


def _global_sectors(m: dict) -> list[float | None]:
    """Global load and store sectors (32 bytes each) through L1."""
    return [_num(m, f"l1tex__t_sectors_pipe_lsu_mem_global_op_{op}.sum") for op in ("ld", "st")]


def _local_memory_facts(m: dict) -> dict[str, object]:
    """Register spills: local memory traffic, and its share of all load/store sectors."""
    f: dict[str, object] = {}
    local = [_num(m, f"l1tex__t_sectors_pipe_lsu_mem_local_op_{op}.sum") for op in ("ld", "st")]
    glob = _global_sectors(m)
    if None not in local:
        f["local_memory_bytes"] = 32.0 * sum(local)
        if None not in glob:
            f["local_memory_share_pct"] = _ratio(sum(local), sum(local) + sum(glob), 100.0) or 0.0
    return f


def _instruction_facts(m: dict) -> dict[str, object]:
    """Which pipes are busy and how shared memory is used."""
    f: dict[str, object] = {"tensor_pipe_pct": _num(m, M_TENSOR), "fp32_pipe_pct": _num(m, M_FMA),
                            "fp64_pipe_pct": _num(m, M_FP64)}
    f.update(pipe_facts(m))
    f["shared_inst_share_pct"] = _ratio(_num(m, "smsp__sass_inst_executed_op_shared.sum"), _num(m, M_INST), 100.0)
    f.update(shared_conflict_facts(m))
    return f


def _global_access_facts(m: dict) -> dict[str, object]:
    """Sectors per request and the bytes used of each sector fetched, loads and stores apart."""
    f: dict[str, object] = {}
    glob = _global_sectors(m)
    for op, word in (("ld", "load"), ("st", "store")):
        requests = _num(m, f"l1tex__t_requests_pipe_lsu_mem_global_op_{op}.sum")
        used = _num(m, f"smsp__sass_average_data_bytes_per_sector_mem_global_op_{op}.ratio")
        if requests:
            f[f"global_{word}_sectors_per_request"] = _ratio(glob[0 if op == "ld" else 1], requests)
        if requests and used != 0:  # 0 with traffic: only LDGSTS/TMA moved bytes, which the SASS counter skips
            f[f"global_{word}_efficiency_pct"] = _ratio(
                _num(m, f"smsp__sass_average_data_bytes_per_sector_mem_global_op_{op}.ratio"),
                _num(m, f"smsp__sass_average_data_bytes_per_sector_mem_global_op_{op}.max_rate"), 100.0)
    return f


def _warp_facts(m: dict) -> dict[str, object]:
    """Divergence (active threads per warp) and the dominant stall reason."""
    f: dict[str, object] = {}
    threads = _num(m, M_THREADS_PER_INST)
    if threads is not None and _num(m, M_INST):
        f["active_threads_per_warp_count"] = threads
        f["warp_efficiency_pct"] = threads / 32.0 * 100.0
    stall = _stall(m)
    if stall:
        f["dominant_stall_reason"], f["dominant_stall_share_pct"] = stall
    return f


def _atomic_facts(m: dict) -> dict[str, object]:
    """Global atomics: how many, their share of instructions, their rate, one L2 unit hotter than the rest."""
    f: dict[str, object] = {}
    atom = [_num(m, f"l1tex__t_requests_pipe_lsu_mem_global_op_{op}.sum") for op in ("atom", "red")]
    dur = _num(m, M_DURATION)
    if None not in atom:
        f["atomic_inst_count"] = sum(atom)
        f["atomic_inst_share_pct"] = _ratio(sum(atom), _num(m, M_INST), 100.0)
        if dur:
            f["atomic_throughput_per_us"] = sum(atom) / (dur / 1e3)
    hot_unit = _num(m, "lts__d_atomic_input_cycles_active.max.pct_of_peak_sustained_elapsed")
    f["l2_atomic_hotspot_ratio"] = _ratio(
        hot_unit, _num(m, "lts__d_atomic_input_cycles_active.avg.pct_of_peak_sustained_elapsed"))
    f["l2_atomic_hot_unit_busy_pct"] = hot_unit
    return f


def launch_facts(launch, total_ns: float, sm_count: float | None, neighbours=(None, None)) -> dict[str, object]:
    """Every kernel fact derivable from one launch's metrics (absent metrics -> absent facts).

    `neighbours`: the names of the launches just before and after it (library attribution).
    """
    m = launch.metrics
    f, origin = _origin_facts(launch, neighbours)
    f.update(_throughput_facts(m, total_ns))
    f.update(launch_work(m))  # FLOPs and DRAM bytes: the per-op roofline's side-by-side (runs/roofline_ncu.py)
    f.update(_launch_shape_facts(m, sm_count))
    f.update(_local_memory_facts(m))
    f.update(_instruction_facts(m))
    f.update(_global_access_facts(m))
    f.update(access_waste_facts(m))
    f.update(_warp_facts(m))
    f.update(_atomic_facts(m))
    f.update(sm_balance_facts(m))
    if origin == "PyTorch" and (op := aten_op_of(launch.name) or aten_op_of(launch.short_name)):
        f["aten_op"], f["aten_op_fix"] = op
    f.update(_ncu_verdict(launch))
    out = {k: v for k, v in f.items() if v is not None and not (isinstance(v, float) and not math.isfinite(v))}
    for k, v in out.items():  # counters sampled in different passes can overshoot 100% slightly
        if k.endswith("_pct") and isinstance(v, float):
            out[k] = min(100.0, max(0.0, v))
    return out


UNITS = {spec.name: spec.unit for spec in CATALOGUE}


def sol_class(sm: float | None, mem: float | None, high: float = SOL_HIGH_PCT) -> str:
    """Chart colouring by the textbook SOL quadrants (rules decide findings with their own params)."""
    if sm is None or mem is None:
        return "unknown"
    if sm >= high and mem >= high:
        return "near_speed_of_light"
    if sm >= high:
        return "compute_bound"
    if mem >= high:
        return "memory_bound"
    return "latency_bound"


def report_program(rep) -> dict[str, str]:
    """framework and gpu_arch of a report, with their evidence: the device attributes (compute
    capability), else the kernel names; the kernel names say who wrote the kernels."""
    names = [launch.name for launch in rep.launches]
    by_names = framework_from_kernel_names(names)
    framework, evidence = by_names if by_names else ("unknown", "library kernels only (cuBLAS/cuDNN...): "
                                                                 "nothing in the report names the program")
    out = {"framework": framework, "framework_evidence": evidence}
    for dev, attrs in sorted(rep.devices.items()):
        major = _num(attrs, "device__attribute_compute_capability_major")
        minor = _num(attrs, "device__attribute_compute_capability_minor")
        cc = f"{major:.0f}.{minor:.0f}" if major is not None and minor is not None else ""
        name = str(attrs.get("device__attribute_display_name") or rep.device_names.get(dev, ""))
        arch = arch_of_device(name, cc)
        if arch:
            out.update(gpu_arch=arch, gpu_arch_evidence=f"device attributes: {name or 'device ' + str(dev)}"
                                                        f"{', compute capability ' + cc if cc else ''}")
            return out
    arch = arch_from_kernel_names(names)
    out["gpu_arch"], out["gpu_arch_evidence"] = arch if arch else ("unknown", "no device attributes and no "
                                                                   "generation-specific kernel names")
    return out


def kernel_analysis(reports: list) -> AnalysisResult:
    """Facts for every launch of every report, run-level totals, and `charts["kernel_sol"]`.

    charts["kernel_sol"]: list of {id, name, sm_pct, mem_pct, time_share_pct, category} per launch,
    for an SM%-vs-memory% scatter (category: near_speed_of_light | compute_bound | memory_bound |
    latency_bound | unknown).
    """
    result = AnalysisResult()
    sol_points = []
    launches = [(rep, launch) for rep in reports for launch in rep.launches]
    durations = [_num(launch.metrics, M_DURATION) for _, launch in launches]
    total_ns = sum(d for d in durations if d)
    order = sorted(range(len(launches)), key=lambda i: (-(durations[i] or 0.0), i))
    time_rank = {id(launches[i][1]): r + 1 for r, i in enumerate(order) if durations[i]}
    for rep in reports:
        source = f"{rep.path} ({READER})"
        sm_count, device_name = None, None
        for dev, attrs in rep.devices.items():
            sm_count = _num(attrs, "device__attribute_multiprocessor_count") or sm_count
            device_name = device_name or str(attrs.get("device__attribute_display_name") or
                                             rep.device_names.get(dev, "")) or None
        result.notes.extend(rep.notes)
        run = {"kernel_launch_count": float(len(rep.launches)),
               "kernel_distinct_count": float(len({launch.name for launch in rep.launches})),
               "kernel_gpu_time_total_ms": total_ns / 1e6 if total_ns else None,
               "device_sm_count": sm_count, "device_name": device_name}
        run.update(report_program(rep))
        for name, value in run.items():
            if value is not None:
                result.facts.append(Fact(name, value, UNITS[name], source))
        names = [launch.name for launch in rep.launches]
        for i, launch in enumerate(rep.launches):
            subject = Subject("kernel", str(launch.id), launch.name)
            around = (names[i - 1] if i > 0 else None, names[i + 1] if i + 1 < len(names) else None)
            facts = launch_facts(launch, total_ns, sm_count, around)
            if id(launch) in time_rank:
                facts["kernel_time_rank"] = float(time_rank[id(launch)])
            for name, value in facts.items():
                if isinstance(value, int) and not isinstance(value, bool):
                    value = float(value)
                result.facts.append(Fact(name, value, UNITS[name], source, subject))
            sm, mem = facts.get("sm_throughput_pct"), facts.get("memory_throughput_pct")
            sol_points.append({"id": str(launch.id), "name": launch.name, "sm_pct": sm, "mem_pct": mem,
                               "time_share_pct": facts.get("kernel_time_share_pct"),
                               "category": sol_class(sm, mem)})
    if not launches:
        result.notes.append("no kernel launches in the Nsight Compute input")
    if any(not any(STALL_RE.match(k) for k in launch.metrics) for _, launch in launches):
        result.notes.append("some launches lack --set full metrics (stall reasons, memory access "
                            "detail); rules that need them are not evaluated")
    result.charts["kernel_sol"] = sol_points
    return result
