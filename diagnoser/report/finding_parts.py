"""What every renderer shows around a finding, beside the Finding itself: its subject label, the
per-kernel table of a grouped finding, why its gain overlaps another's, why it is only info, its
sources, its playbook reference; and the report's severity counts and how it was made."""
from __future__ import annotations

from ..kernel_names import short_name
from ..findings import KERNEL_ROWS
from .formatting import fmt_value, share_pct

KERNEL_COLUMNS = 3  # evidence columns of a grouped finding's per-kernel table
_NOT_COLUMNS = {"launches", "kernels", "launch_ids", "kernel_name", "kernel_time_share_pct"}


def playbook_ref(finding, report=None) -> str:
    """How an installed user reads the rule's playbook section (the handbook ships in the package);
    for a rule of the user's packs, with the packs' `--rules`, without which the command knows it not."""
    user_rule = finding.rule in (getattr(report, "rule_files", None) or {})
    return f"diagnose playbook {finding.rule}{pack_options(report) if user_rule else ''}"


def handbook_command(report=None) -> str:
    """The command that writes the handbook of every rule the report used (its packs' too)."""
    return f"diagnose playbook{pack_options(report)} -o playbooks.html"


def pack_options(report) -> str:
    """` --rules PATH` for each rule pack the report was made with, as given ('' for none)."""
    from ..text_safety import shell_word
    packs = (getattr(report, "settings", None) or {}).get("rule_packs", [])
    return "".join(f" --rules {shell_word(p['path'])}" for p in packs)


def subject_label(f) -> tuple[str, str]:
    """("kernel 86", "short name") for a finding's subject; the name only where it says more than the id."""
    if f.subject is None:
        return "", ""
    label = f"{f.subject.kind} {f.subject.id}"
    name = f.subject.name or ""
    if name in (label, f.subject.id):
        name = ""
    return label, short_name(name) if name else ""


def kernel_table(f) -> dict | None:
    """The per-kernel table of a finding grouped across kernels: the costliest KERNEL_ROWS kernels,
    the rest summed in one row. Columns: the first numeric evidence facts of the rule."""
    if not f.kernels:
        return None
    columns = [n for n, ev in f.evidence.items() if n not in _NOT_COLUMNS
               and isinstance(ev.get("value"), (int, float)) and not isinstance(ev.get("value"), bool)][:KERNEL_COLUMNS]
    rows = []
    for k in f.kernels[:KERNEL_ROWS]:
        share = k.evidence.get("kernel_time_share_pct", {}).get("value") if "kernel_time_share_pct" in k.evidence else None
        rows.append({
            "kernel": short_name(k.subject.name or k.subject.id) if k.subject else "",
            "first": k.subject.id if k.subject else "", "launches": k.count,
            "gain": share_pct(k.estimated_gain) if k.estimated_gain > 0 else "-",
            "cells": [fmt_value(k.evidence[c]["value"], k.evidence[c].get("unit", "")) if c in k.evidence else "n/a"
                       for c in columns],
            "share": "" if share is None else fmt_value(share, "%"),
        })
    rest = f.kernels[KERNEL_ROWS:]
    more = None
    if rest:
        more = {"kernels": len(rest), "launches": sum(k.count for k in rest),
                "gain": share_pct(min(1.0, sum(k.estimated_gain for k in rest)))}
    return {"columns": columns, "rows": rows, "more": more, "kernels": len(f.kernels)}


def gain_note(f, index_of: dict) -> str:
    """Why a finding's gain does not add to the ones above it (the same time explained twice), and
    what they explain together, each part of the time counted once."""
    if f.marginal_gain is None or not f.overlaps or f.estimated_gain - f.marginal_gain < 0.005:
        return ""
    refs = ", ".join(f"`{r}`" + (f" (finding {index_of[r]})" if r in index_of else "") for r in f.overlaps)
    many = len(f.overlaps) > 1
    what = "this share" if f.marginal_gain < 0.005 else "part of this share"
    note = f"{refs} already {'claim' if many else 'claims'} {what} of {f.gain_of}; beyond {'them' if many else 'it'}: " \
           f"{share_pct(f.marginal_gain)}"
    together = getattr(f, "gain_together", None)
    if together is not None:
        note += f"; with {'them' if many else 'it'}: {share_pct(together)} of {f.gain_of} together"
    return note


def _ms(x: float) -> str:
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def _ms_range(low: float, high: float) -> str:
    lo, hi = _ms(low), _ms(high)
    return f"{lo} ms" if lo == hi else f"{lo}-{hi} ms"


def prediction_text(f) -> str:
    """The step time after the finding's fix: "33.4 ms -> 26.8-28.2 ms a step"; for a finding on another
    unit, its own: "18.31 GiB needed at the peak -> 2.31-10.31 GiB (assumes ...)" ("" without one)."""
    p = getattr(f, "predicted_step_ms", None)
    step = f"{_ms(f.step_ms)} ms -> {_ms_range(*p)} a step" if p is not None and f.step_ms is not None else ""
    if step and getattr(f, "step_assumes", None):
        step += f" (assumes {f.step_assumes})"
    other = other_unit_text(getattr(f, "prediction", None) or {})
    return "; ".join(t for t in (step, other) if t)


def _amount(x: float, unit: str) -> str:
    return f"{x:.2f}" if unit == "GiB" else _ms(x)


def other_unit_text(p: dict) -> str:
    """A memory or kernel finding's prediction in its own unit, with what it assumes ("" without one)."""
    if not p:
        return ""
    unit = p["unit"]
    before = (f"{_amount(p['measured'], unit)} GiB {p.get('measure', 'needed at the peak')}" if unit == "GiB"
              else f"{_amount(p['measured'], unit)} us a launch")
    if "not_computable" in p:
        return f"{before} -> not computable ({p['not_computable']})"
    lo, hi = _amount(p["low"], unit), _amount(p["high"], unit)
    return f"{before} -> {lo if lo == hi else f'{lo}-{hi}'} {unit} (assumes {p['assumes']})"


def predicted_all_text(report) -> str:
    """The step time after all the warning and critical findings' fixes together, and the peak memory after
    all the memory fixes together ("" without either)."""
    p = getattr(report, "predicted_step_ms_all", None)
    m = getattr(report, "predicted_peak_all", None)
    step = f"{_ms(p['step_ms'])} ms -> {_ms_range(p['low'], p['high'])} a step" if p else ""
    peak = (f"the memory fixes together, each owner's bytes counted once: {m['peak_gib']:.2f} GiB needed at the "
            f"peak -> {m['low']:.2f}-{m['high']:.2f} GiB" if m else "")
    return "; ".join(t for t in (step, peak) if t)


def severity_note(f) -> str:
    """Why a warning/critical rule's finding is info here (the gain floor)."""
    if not f.rule_severity or f.rule_severity == f.severity:
        return ""
    from ..findings import WARNING_MIN_GAIN_PCT
    return (f"info here: `{f.rule}` is a {f.rule_severity} rule, but its estimated gain is under "
            f"{WARNING_MIN_GAIN_PCT.value:g}% of {f.gain_of} (setting findings.warning_min_gain_pct)")


def evidence_sources(f) -> list[dict]:
    """The finding's evidence grouped by the source that measured it: [{source, facts}], in evidence order."""
    by: dict[str, list[str]] = {}
    for name in f.evidence:
        src = (getattr(f, "evidence_sources", None) or {}).get(name)
        if src:
            by.setdefault(src, []).append(name)
    return [{"source": k, "facts": v} for k, v in by.items()]


def summary_counts(findings) -> dict:
    counts = {"critical": 0, "warning": 0, "info": 0}
    for f in findings:
        counts[f.severity] += 1
    return counts


def settings_lines(report) -> list[str]:
    """How the report was made, one Markdown line each: rule packs, --param, analysis settings."""
    made = getattr(report, "settings", None) or {}
    lines = []
    for pack in made.get("rule_packs", []):
        adds = [r for r in pack["rules"] if r not in pack["replaces"]]
        parts = ([f"adds {', '.join(adds)}"] if adds else []) + \
                ([f"replaces shipped {', '.join(pack['replaces'])}"] if pack["replaces"] else [])
        lines.append(f"rule pack `{pack['path']}`: {'; '.join(parts) or 'no rules'}")
    for p in made.get("params", []):
        if "pack_param" in p:
            lines.append(f"--param {p['pack_param']}={p['value']} (default {p['default']}; "
                         f"pack param of {', '.join(p['rules']) or 'no rule'})")
        elif "condition" in p:
            lines.append(f"--param {p['condition']}.{p['param']}={p['value']} (default {p['default']}; "
                         f"shared condition of {', '.join(p['rules']) or 'no rule'})")
        else:
            lines.append(f"--param {p['rule']}.{p['param']}={p['value']} (default {p['default']})")
    for st in made.get("analysis_settings", made.get("settings", [])):
        unit = f" {st['unit']}" if st.get("unit") else ""
        lines.append(f"setting {st['name']}={st['value']} (default {st['default']}{unit})")
    return lines
