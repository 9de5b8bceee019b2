"""A comparison (core.build) as Markdown or JSON (`diagnoser.compare/1`, docs/compare.md)."""
from __future__ import annotations

import json

from .._version import __version__
from ..report.formatting import fmt_value, md_cell
from ..text_safety import displayable, json_text, md_code, md_inert, visible_text
from .gate import judged

FACT_ROWS_MD = 40  # changed facts listed in Markdown (JSON: every fact both sides have)
KERNEL_ROWS_MD = 25
TIMELINE_ROWS_MD = 12
ARROW = {"right": "better", "wrong": "**worse**", "same": "same", "changed": "changed", "steps differ": "steps differ"}


def _v(x, unit=""):
    if x is None:
        return "n/a"
    return fmt_value(x, unit) if isinstance(x, (int, float)) and not isinstance(x, bool) else str(x)


def _chg(row) -> str:
    if row.get("change_pct") is None:
        return "" if row.get("moved") == "same" else "changed"
    s = f"{row['change_pct']:+.1f}%"
    if row.get("speedup"):
        s += f" ({row['speedup']:.2f}x)"
    return s


def json_doc(c: dict, gate_pct: float | None = None, reasons: list | None = None) -> dict:
    out = {k: v for k, v in c.items() if k not in ("charts", "tables")}
    out["generator"] = f"diagnoser {__version__}"
    if gate_pct is not None:
        out["gate"] = {"fail_on_regression_pct": gate_pct, "tripped": bool(reasons), "reasons": list(reasons or [])}
        noisy = judged(c, gate_pct)
        if noisy is not None:
            out["gate"]["within_noise"] = noisy[1]
        if not_gated(c):
            out["gate"]["not_gated"] = not_gated(c)
    return out


def not_gated(c: dict) -> list[str]:
    """What the CI gate could not judge, and why (the two sides cut steps differently)."""
    basis = c.get("steps_basis") or {}
    if basis and not basis.get("comparable", True):
        return [f"step time, time per step and GPU busy share: {basis['why']}"]
    return []


def steps_text(c: dict) -> str:
    """Why the per-step numbers are left out, and what is shown instead ("" when they are compared)."""
    basis = c.get("steps_basis") or {}
    if not basis or basis.get("comparable", True):
        return ""
    spans = [f"{side.upper()} {_v((basis[side] or {}).get('span_ms'), 'ms')}" for side in ("before", "after")]
    return (f"**Steps not compared:** {basis['why']}. Step time, time per step, the GPU busy share of the steps and "
            f"the steps' phases are left out; below, each kernel's totals over each side's analysed span "
            f"({', '.join(spans)}), and its time per launch, which does not depend on where steps are cut.")


def render_json(c: dict, gate_pct=None, reasons=None) -> str:
    return json_text(json.dumps(json_doc(c, gate_pct, reasons), indent=2, ensure_ascii=False, sort_keys=False, default=str)) + "\n"


def _inputs(side) -> str:
    return ", ".join(md_code(i['path']) for i in side["inputs"]) or "(none)"


def render_markdown(c: dict, gate_pct=None, reasons=None) -> str:
    """The comparison as Markdown: the layout is templates/compare.md.j2, the values markdown_view."""
    from ..report.template_env import template_env  # jinja2 only when Markdown is asked for
    c, reasons = displayable(c), displayable(reasons)  # names from the inputs shown, never run (text_safety)
    view = markdown_view(c, gate_pct, reasons)
    return md_inert(visible_text(template_env(False).get_template("compare.md.j2").render(view=view)))


def markdown_view(c: dict, gate_pct=None, reasons=None) -> dict:
    """Every value the Markdown page shows, formatted; table rows as lists of cells."""
    s = c["summary"]
    view = {"before_inputs": _inputs(c["before"]), "after_inputs": _inputs(c["after"]),
            "counts": ", ".join(f"{s[k]} {k}" for k in ("fixed", "improved", "unchanged", "regressed")),
            "new": s["new"], "next_limit": s.get("next limit"), "noise": f"{c['noise_pct']:.1f}%",
            "before_noise": c["before"]["noise_basis"], "after_noise": c["after"]["noise_basis"],
            "headlines": [[h["label"], _v(h["before"], h["unit"]), _v(h["after"], h["unit"]), _chg(h),
                           ARROW.get(h.get("moved"), "")] for h in c["headlines"]],
            "why_steps": steps_text(c), "totals": _totals_rows(c) if c.get("kernel_totals") else None,
            "findings": [_finding_row(f) for f in c["findings"]],
            "subjects": [per for f in c["findings"] if (per := _subjects_view(f))],
            "phases": [[p["phase"], _v(p["before"], "ms"), _v(p["after"], "ms"), _chg(p)] for p in c["phases"]],
            "gate": _gate_view(c, gate_pct, reasons), "notes": c["notes"], "version": __version__,
            "made": _made_with(c.get("settings") or {})}
    view.update(_kernel_rows(c))
    view.update(_fact_rows(c))
    return view


def _totals_rows(c: dict) -> dict:
    """Each kernel's and op's totals over each side's span (the steps were cut differently)."""
    rows, ops = c.get("kernel_totals") or [], c.get("op_totals") or []
    basis = c.get("steps_basis") or {}
    b, a = basis.get("before") or {}, basis.get("after") or {}
    every = [f"{_v(b.get('kernels'))} -> {_v(a.get('kernels'))}", _v(b.get("kernel_ms"), "ms"), _v(a.get("kernel_ms"), "ms")]
    kernels = []
    for k in rows[:TIMELINE_ROWS_MD]:
        pb, pa = k["before"] or {}, k["after"] or {}
        kernels.append([f"`{md_cell(k['name'])}`", f"{_v(k['launches'][0])} -> {_v(k['launches'][1])}",
                        _v(pb.get("gpu_ms"), "ms"), _v(pa.get("gpu_ms"), "ms"), _v(pb.get("us_per_launch"), "us"),
                        _v(pa.get("us_per_launch"), "us"), presence(k) or _chg(k["us_per_launch"])])
    op_rows = []
    for o in ops[:TIMELINE_ROWS_MD]:
        pb, pa = o["before"] or {}, o["after"] or {}
        op_rows.append([f"`{md_cell(o['op'])}`", f"{_v(pb.get('calls'))} -> {_v(pa.get('calls'))}",
                        _v(pb.get("gpu_ms"), "ms"), _v(pa.get("gpu_ms"), "ms"), _v(pb.get("gpu_us_per_call"), "us"),
                        _v(pa.get("gpu_us_per_call"), "us"), presence(o) or _chg(o["gpu_us_per_call"])])
    return {"all": every, "kernels": kernels, "kernels_more": len(rows) - TIMELINE_ROWS_MD, "ops": op_rows,
            "ops_more": len(ops) - TIMELINE_ROWS_MD}


def _finding_row(f: dict) -> list[str]:
    sev = f"{f.get('severity_before') or '-'} -> {f.get('severity_after') or '-'}"
    return [f"**{f['verdict']}**", f"`{f['rule']}`", str(f["category"]), sev, md_cell(f.get("why", "")),
            md_cell(_verify_text(f))]


def _subjects_view(f: dict) -> dict | None:
    """A finding's verdict per kernel (or rank), and what limits each next; None without subjects."""
    subs = f.get("subjects") or []
    if not subs:
        return None
    kind = next((x[k]["kind"] for x in subs for k in ("before", "after") if x.get(k)), "subject")
    nexts = [sj for sj in subs if sj.get("why")]
    return {"rule": f["rule"], "kind": kind,
            "rows": [[str(sj["verdict"]), _subj(sj["before"]), _subj(sj["after"])] for sj in subs[:KERNEL_ROWS_MD]],
            "more": len(subs) - KERNEL_ROWS_MD,
            "nexts": [f"{_subj(sj['after'])}: {md_cell(sj['why'])}" for sj in nexts[:KERNEL_ROWS_MD]]}


def _kernel_rows(c: dict) -> dict:
    """The matched kernels of the kernel reports and of the timelines, the costliest first."""
    kernels = []
    for k in c["kernels"][:KERNEL_ROWS_MD]:
        d = k["duration_us"]
        ids = f"#{(k['before'] or {}).get('id', '-')} -> #{(k['after'] or {}).get('id', '-')}"
        if k.get("config_changed"):
            ids += " (launch configuration changed)"
        sm, mem = k["sm_throughput_pct"], k["memory_throughput_pct"]
        kernels.append([md_cell(md_code(k["name"])), ids, _v(d.get("before"), "us"), _v(d.get("after"), "us"), _chg(d),
                        f"{_v(sm[0])} -> {_v(sm[1])}", f"{_v(mem[0])} -> {_v(mem[1])}"])
    timeline = c.get("timeline_kernels") or []
    tkernels = [[md_cell(md_code(k["name"])), f"{_cfg(k['before'])} -> {_cfg(k['after'])}",
                 _v(k["ms_per_step"].get("before"), "ms"), _v(k["ms_per_step"].get("after"), "ms"),
                 presence(k) or _chg(k["ms_per_step"]),
                 f"{_v(k['launches_per_step'][0])} -> {_v(k['launches_per_step'][1])}"]
                for k in timeline[:TIMELINE_ROWS_MD]]
    return {"kernels": kernels, "kernels_more": len(c["kernels"]) - KERNEL_ROWS_MD,
            "tkernels": tkernels, "tkernels_more": len(timeline) - TIMELINE_ROWS_MD}


def _fact_rows(c: dict) -> dict:
    """The run facts that moved, and a line on the rest."""
    run = [r for r in c["facts"] if r["subject"] is None]
    moved = [r for r in run if r.get("moved") in ("right", "wrong", "changed")]
    more = len(moved) - FACT_ROWS_MD
    same = sum(1 for r in run if r.get("moved") == "same")
    apart = sum(1 for r in run if r.get("moved") == "steps differ")
    left = (f"{same} run facts unchanged" + (f", {more} more changed" if more > 0 else "")
            + (f", {apart} per-step facts not compared (steps cut differently)" if apart else "")
            + "; per-kernel and per-rank facts: JSON (`facts`).")
    return {"facts": [[str(r["fact"]), md_cell(_v(r["before"], r["unit"])), md_cell(_v(r["after"], r["unit"])), _chg(r),
                       ARROW.get(r["moved"], "")] for r in moved[:FACT_ROWS_MD]],
            "facts_left": left}


def _gate_view(c: dict, gate_pct, reasons) -> dict | None:
    """`--fail-on-regression`: why it trips, or why it passes, and what it could not judge."""
    if gate_pct is None:
        return None
    noisy = judged(c, gate_pct)
    if reasons:
        lines = [f"FAIL: {r}" for r in reasons]
    elif noisy is None:
        lines = ["pass: no headline number worse by more than the limit, no new or regressed warning."]
    else:
        lines = ["pass: no measure worse beyond max(PCT, its run-to-run noise), no new or regressed warning of the code."]
    lines += [str(r) for r in (noisy[1] if noisy else [])]
    lines += [f"not gated: {r}" for r in not_gated(c)]
    return {"pct": f"{gate_pct:g}", "lines": lines}


def _made_with(st: dict) -> str:
    """The rule params, settings and rule packs both sides were diagnosed with (the footer's tail)."""
    made = [f"--param {x['pack_param'] if 'pack_param' in x else x.get('rule', x.get('condition')) + '.' + x['param']}="
            f"{x['value']} (default {x['default']})" for x in st.get("params", [])]
    made += [f"--set {x['name']}={x['value']} (default {x['default']})" for x in st.get("settings", [])]
    made += [f"rule pack {x.get('path')}" for x in st.get("rule_packs", [])]
    return ": " + ", ".join(made) + "." if made else " (shipped rules, defaults)."


def presence(k) -> str:
    """`gone` / `new` for a kernel one side lacks ("" when both have it)."""
    return "gone" if not k.get("after") else ("new" if not k.get("before") else "")


def _cfg(side) -> str:
    return "-" if not side else f"{side.get('grid')} x {side.get('block')}"


def _subj(s) -> str:
    if not s:
        return "-"
    name = s.get("name") or ""
    cfg = f" grid {_v(s.get('grid'))} x {_v(s.get('block'))}" if s.get("grid") is not None else ""
    return f"#{s['id']} {md_cell(md_code(name))}{cfg}"


def _verify_text(f) -> str:
    v = f.get("verify_check") or {}
    checks = v.get("checks") or []
    if not checks:
        return ""
    parts = []
    for ch in checks[:4]:
        mark = {True: "ok", False: "not met", None: "n/a"}[ch.get("holds")]
        t = "" if ch.get("threshold") is None else f" {_v(ch['threshold'])}"
        parts.append(f"{ch['fact']} {ch['op']}{t}: {_v(ch.get('before'))} -> {_v(ch.get('after'))} ({mark})")
    if len(checks) > 4:
        parts.append(f"{len(checks) - 4} more")
    return "; ".join(parts)
