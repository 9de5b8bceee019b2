"""A Report as the `diagnoser.report/1` JSON document (the CI contract)."""
from __future__ import annotations

import json

from .._version import __version__
from ..rulespec.model import SEVERITY_RANK
from ..text_safety import json_text
from .finding_parts import summary_counts
from .run_sections import first_findings, run_sections

SCHEMA = "diagnoser.report/1"


def report_json(report, top: int | None = None, min_severity: str = "info") -> dict:
    limit = SEVERITY_RANK[min_severity]
    kept = [f for f in report.findings if SEVERITY_RANK[f.severity] <= limit]
    shown, rest = first_findings(report, kept, top)
    out = {
        "schema": SCHEMA,
        "inputs": report.inputs,
        "summary": summary_counts(kept),
        **_predicted_all(report),
        **_predicted_peak_all(report),
        "findings": [f.to_json() for f in shown],
        "not_evaluated": [n.to_json() for n in report.not_evaluated],
        "not_applicable": [n.to_json() for n in getattr(report, "not_applicable", None) or []],
        "notes": report.notes,
        **({"runs": _runs_json(report, kept)} if getattr(report, "separate_runs", None) else {}),
        "settings": dict({"diagnoser": __version__, "params": [], "rule_packs": [], "analysis_settings": []},
                         **_settings_json(report)),
    }
    roofline = (getattr(report, "charts", None) or {}).get("roofline")
    if roofline and not getattr(report, "separate_runs", None):  # per-op roofline rows (diagnoser/timeline/roofline.py)
        out["roofline"] = roofline
        beside = report.charts.get("roofline_ncu")
        if beside:  # the same ops as Nsight Compute measured them (diagnoser/runs/roofline_ncu.py)
            out["roofline_ncu"] = beside
    if rest:
        out["more_findings"] = [{"rule": f.rule, "severity": f.severity, "title": f.title,
                                 "estimated_gain": round(f.estimated_gain, 4), "count": f.count,
                                 **({"run": f.run} if f.run is not None else {})} for f in rest]
    if len(kept) < len(report.findings):
        out["left_out"] = {"min_severity": min_severity, "findings": len(report.findings) - len(kept)}
    return out


def _predicted_all(report) -> dict:
    p = getattr(report, "predicted_step_ms_all", None)
    if not p:
        return {}
    return {"predicted_step_ms_all": [round(p["low"], 2), round(p["high"], 2)], "step_ms": round(p["step_ms"], 2)}


def _predicted_peak_all(report) -> dict:
    p = getattr(report, "predicted_peak_all", None)
    if not p:
        return {}
    return {"predicted_peak_all": [round(p["low"], 3), round(p["high"], 3)], "peak_gib": round(p["peak_gib"], 3)}


def _runs_json(report, kept: list) -> list[dict]:
    """Several separate runs: each with its inputs, the counts of its findings and its own chart data
    (the series the Markdown tables and HTML charts draw: steps, top_kernels, top_ops, kernel_sol...)."""
    by_run = {s.run: s.findings for s in run_sections(report, kept)}
    out = []
    for r in report.separate_runs:
        entry = {k: v for k, v in r.items() if k not in ("charts", "facts")}  # facts: not in the JSON report
        entry["summary"] = summary_counts(by_run.get(r["run"], []))
        entry["charts"] = dict(r.get("charts") or {})
        out.append(entry)
    return out


def _settings_json(report) -> dict:
    made = dict(getattr(report, "settings", None) or {})
    if "settings" in made:
        made["analysis_settings"] = made.pop("settings")
    made.pop("pack_settings", None)
    return made


def render_json(report, top: int | None = None, min_severity: str = "info") -> str:
    # every value as read; controls, bidi and non-characters as \u escapes (text_safety.json_text)
    return json_text(json.dumps(report_json(report, top, min_severity), indent=2, sort_keys=False, ensure_ascii=False)) + "\n"
