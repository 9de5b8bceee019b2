"""A report seen through a selection of its Nsight Compute launches (`--kernels`, `--to-kernels`)."""
from __future__ import annotations

from .sides import _num
from .verdicts import _leaves


def restrict(report, ids: list[str]):
    """The report seen through a selection of kernel launches (Nsight Compute ids): facts of other
    kernels dropped, GPU-time totals and gain shares re-based on the kept launches, kernel findings
    keeping only their kept kernels. For twins inside one report (a kernel and its fixed version)."""
    from copy import copy
    from dataclasses import replace as dc_replace
    from ..facts import Fact
    keep = set(ids)
    kernel_ids = {f.subject.id for f in report.facts if f.subject is not None and f.subject.kind == "kernel"}
    missing = [i for i in ids if i not in kernel_ids]
    if missing:
        from ..errors import DiagnoserError
        raise DiagnoserError(f"--kernels: no kernel launch {', '.join(missing)} in "
                             f"{', '.join(i['path'] for i in report.inputs)} (launch ids: diagnose facts FILE)")
    dur = {f.subject.id: f.value for f in report.facts if f.subject is not None and f.subject.kind == "kernel"
           and f.name == "kernel_duration_us" and f.subject.id in keep}
    full = next((f.value for f in report.facts if f.subject is None and f.name == "kernel_gpu_time_total_ms"), None)
    part = sum(v for v in dur.values() if _num(v) is not None) / 1000.0
    scale = (full / part) if full and part else 1.0
    facts = []
    for f in report.facts:
        if f.subject is not None and f.subject.kind == "kernel" and f.subject.id not in keep:
            continue
        if f.subject is None and f.name == "kernel_gpu_time_total_ms":
            f = Fact(f.name, round(part, 6), f.unit, f.source, f.subject)
        elif f.subject is None and f.name in ("kernel_launch_count", "kernel_distinct_count"):
            f = Fact(f.name, float(len(keep)), f.unit, f.source, f.subject)
        elif f.subject is not None and f.name == "kernel_time_share_pct" and _num(f.value) is not None:
            f = Fact(f.name, min(100.0, f.value * scale), f.unit, f.source, f.subject)
        facts.append(f)
    findings = []
    for f in report.findings:
        if f.subject is None or f.subject.kind != "kernel":
            findings.append(f)
            continue
        leaves = [dc_replace(k, estimated_gain=min(1.0, k.estimated_gain * scale)) for k in _leaves(f)
                  if k.subject is not None and k.subject.id in keep]
        if not leaves:
            continue
        leaves.sort(key=lambda k: -k.estimated_gain)
        g = dc_replace(f, subject=leaves[0].subject, estimated_gain=min(1.0, sum(k.estimated_gain for k in leaves)),
                       kernels=leaves if f.kernels else [])
        findings.append(g)
    out = copy(report)
    out.facts, out.findings = facts, findings
    out.charts = dict(report.charts)
    if report.charts.get("kernel_sol"):
        out.charts["kernel_sol"] = [r for r in report.charts["kernel_sol"] if str(r.get("id")) in keep]
    return out
