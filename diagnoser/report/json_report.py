"""A Report as the `diagnoser.report/1` JSON document (the CI contract)."""
from __future__ import annotations

import json

from .. import __version__
from ..rulespec.model import SEVERITY_RANK
from .finding_parts import summary_counts

SCHEMA = "diagnoser.report/1"


def report_json(report, top: int | None = None, min_severity: str = "info") -> dict:
    limit = SEVERITY_RANK[min_severity]
    kept = [f for f in report.findings if SEVERITY_RANK[f.severity] <= limit]
    out = {
        "schema": SCHEMA,
        "inputs": report.inputs,
        "summary": summary_counts(kept),
        "findings": [f.to_json() for f in (kept[:top] if top else kept)],
        "not_evaluated": [n.to_json() for n in report.not_evaluated],
        "notes": report.notes,
        **({"runs": report.runs} if getattr(report, "runs", None) else {}),
        "settings": dict({"diagnoser": __version__, "params": [], "rule_packs": [], "analysis_settings": []},
                         **_settings_json(report)),
    }
    if top and len(kept) > top:
        out["more_findings"] = [{"rule": f.rule, "severity": f.severity, "title": f.title,
                                 "estimated_gain": round(f.estimated_gain, 4), "count": f.count} for f in kept[top:]]
    if len(kept) < len(report.findings):
        out["left_out"] = {"min_severity": min_severity, "findings": len(report.findings) - len(kept)}
    return out


def _settings_json(report) -> dict:
    made = dict(getattr(report, "settings", None) or {})
    if "settings" in made:
        made["analysis_settings"] = made.pop("settings")
    made.pop("pack_settings", None)
    return made


def render_json(report, top: int | None = None, min_severity: str = "info") -> str:
    return json.dumps(report_json(report, top, min_severity), indent=2, sort_keys=False, ensure_ascii=False) + "\n"
