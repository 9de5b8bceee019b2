"""A kernel finding's duration after its fix, at the roof the fixed kernel should reach (docs/calibration.md,
"Other units"). Nsight Compute gives each unit's busy share of the kernel's time (DRAM, L2, L1/shared, each
SM pipe), so a unit's time at its peak is `duration x share`: the DRAM one is the bytes moved over the peak
bandwidth ncu measured against. The fix takes away the work it names (conflict wavefronts, wasted sectors,
divisions, barrier waits); the kernel then runs at the busiest unit left."""
from __future__ import annotations

# units whose busy share (% of the kernel's time at that unit's peak) bounds the kernel's time
MEMORY_UNITS = ("dram_throughput_pct", "l2_throughput_pct")
UNITS = MEMORY_UNITS + ("l1_throughput_pct", "fp32_pipe_pct", "fp64_pipe_pct", "xu_pipe_pct", "lsu_pipe_pct",
                        "adu_pipe_pct", "alu_pipe_pct", "tensor_pipe_pct")
# a fixed kernel runs its busiest remaining unit at this share of peak or better (ncu's memory-bound healthy
# kernels run at 70-95%)
ROOF_EFFICIENCY_LOW = 0.7
# the kernel without divisions is memory-bound at this share of the memory roof or better
MEMORY_EFFICIENCY_LOW = 0.5
# waits no longer at the barrier: the warps hide up to this share of the remaining stall time
STALL_HIDDEN_SHARE = 0.5


def kernel_after_fix(rule: str, values: dict, peaks: dict | None = None) -> dict | None:
    """{unit, measured, low, high, assumes} in us for one launch's finding of `rule` on its kernel facts
    `values`; None for a rule whose fix this does not model or facts that are missing. `peaks`: the device's
    datasheet peaks (timeline/device_peaks.lookup: {label, tensor: {dtype: TFLOP/s}}), for the tensor-core roof."""
    duration = _num(values, "kernel_duration_us")
    model = _FIXES.get(rule)
    if duration is None or duration <= 0 or model is None:
        return None
    got = model(values, duration, peaks) if rule in NEEDS_PEAKS else model(values, duration)
    if got is None:
        return None
    low, high, assumes = got
    high = min(high, duration)
    return {"unit": "us", "measured": duration, "low": min(low, high), "high": high, "assumes": assumes}


def _num(values: dict, name: str) -> float | None:
    v = values.get(name)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _shares(values: dict) -> dict[str, float]:
    return {u: v for u in UNITS if (v := _num(values, u)) is not None}


def _roof(shares: dict[str, float], duration: float) -> tuple[float, str]:
    unit = max(shares, key=shares.get)
    return duration * shares[unit] / 100, unit.replace("_throughput_pct", "").replace("_pipe_pct", " pipe")


def _without_waste(values, duration, removed_share: str, scaled: tuple[str, ...], what: str):
    waste = _num(values, removed_share)
    shares = _shares(values)
    if waste is None or not shares:
        return None
    keep = max(0.0, 1 - waste / 100)
    for u in scaled:
        if u in shares:
            shares[u] *= keep
    roof, unit = _roof(shares, duration)
    return (roof, roof / ROOF_EFFICIENCY_LOW,
            f"{what} ({waste:.0f}%) goes; the kernel then runs at the {unit} roof ({roof:.0f} us at peak), "
            f"at {ROOF_EFFICIENCY_LOW:.0%}-100% of it")


def _bank_conflicts(values, duration):
    return _without_waste(values, duration, "shared_conflict_pipe_pct", ("l1_throughput_pct",),
                          "the conflict wavefronts' share of the L1/shared pipe")


def _uncoalesced(values, duration):
    return _without_waste(values, duration, "global_wasted_sector_share_pct",
                          ("dram_throughput_pct", "l2_throughput_pct", "l1_throughput_pct"),
                          "the wasted sectors' share of global traffic")


def _divisions(values, duration):
    shares = {u: v for u, v in _shares(values).items() if u in MEMORY_UNITS}
    if not shares:
        return None
    roof, unit = _roof(shares, duration)
    return (roof, roof / MEMORY_EFFICIENCY_LOW,
            f"without the divisions the kernel is memory-bound: its bytes at the {unit} roof ({roof:.0f} us at "
            f"peak), at {MEMORY_EFFICIENCY_LOW:.0%}-100% of it")


def _barrier(values, duration):
    stall = _num(values, "dominant_stall_share_pct")
    shares = {u: v for u, v in _shares(values).items() if u in MEMORY_UNITS}
    if stall is None or not shares:
        return None
    roof, unit = _roof(shares, duration)
    high = duration * (1 - stall / 100)
    return (max(roof, high * (1 - STALL_HIDDEN_SHARE)), max(roof, high),
            f"the barrier's {stall:.0f}% of the stalls goes (high); the freed warps hide up to "
            f"{STALL_HIDDEN_SHARE:.0%} of the rest (low); never below the {unit} roof ({roof:.0f} us)")


def _tensor_cores(values, duration, peaks):
    flops = _num(values, "kernel_flop_count")
    tensor = (peaks or {}).get("tensor", {})
    if not flops or "bf16" not in tensor or "tf32" not in tensor:
        return None
    # DRAM only: a tensor-core GEMM tiles differently, its L2 traffic is not the FP32 kernel's
    shares = {u: v for u, v in _shares(values).items() if u == "dram_throughput_pct"}
    roof_mem, unit = _roof(shares, duration) if shares else (0.0, "dram")
    low = flops / (tensor["bf16"] * 1e6)  # TFLOP/s -> FLOP/us
    high = flops / (tensor["tf32"] * 1e6 * ROOF_EFFICIENCY_LOW)
    return (max(low, roof_mem), max(high, roof_mem / ROOF_EFFICIENCY_LOW),
            f"its {flops / 1e9:.1f} GFLOP on tensor cores: bf16 at the {peaks['label']} peak of "
            f"{tensor['bf16']:.0f} TFLOP/s (low) .. TF32 at {ROOF_EFFICIENCY_LOW:.0%} of {tensor['tf32']:.0f} (high), "
            f"never below the {unit} roof ({roof_mem:.0f} us)")


NEEDS_PEAKS = {"KERN002"}
_FIXES = {
    "KERN002": _tensor_cores,
    "KERN005": _bank_conflicts,
    "KERN004": _uncoalesced,
    "KERN013": _divisions,
    "KERN015": _barrier,
}
