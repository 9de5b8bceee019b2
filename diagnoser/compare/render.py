"""A comparison (core.build) as Markdown or JSON (`diagnoser.compare/1`, docs/compare.md)."""
from __future__ import annotations

import json

from .. import __version__
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
    out = {k: v for k, v in c.items() if k != "charts"}
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


def _totals_md(c: dict) -> list[str]:
    rows = c.get("kernel_totals") or []
    if not rows:
        return []
    basis = c.get("steps_basis") or {}
    b, a = basis.get("before") or {}, basis.get("after") or {}
    L = ["| kernel | launches before -> after | GPU time before | after | per launch before | after | change per launch |",
         "|---|---|---|---|---|---|---|",
         f"| all kernels | {_v(b.get('kernels'))} -> {_v(a.get('kernels'))} | {_v(b.get('kernel_ms'), 'ms')} | "
         f"{_v(a.get('kernel_ms'), 'ms')} | | | |"]
    for k in rows[:TIMELINE_ROWS_MD]:
        pb, pa = k["before"] or {}, k["after"] or {}
        L.append(f"| `{md_cell(k['name'])}` | {_v(k['launches'][0])} -> {_v(k['launches'][1])} | "
                 f"{_v(pb.get('gpu_ms'), 'ms')} | {_v(pa.get('gpu_ms'), 'ms')} | {_v(pb.get('us_per_launch'), 'us')} | "
                 f"{_v(pa.get('us_per_launch'), 'us')} | {presence(k) or _chg(k['us_per_launch'])} |")
    if len(rows) > TIMELINE_ROWS_MD:
        L.append(f"| ... {len(rows) - TIMELINE_ROWS_MD} more (JSON `kernel_totals`) | | | | | | |")
    ops = c.get("op_totals") or []
    if ops:
        L += ["", "| op | calls before -> after | GPU time before | after | per call before | after | change per call |",
              "|---|---|---|---|---|---|---|"]
        for o in ops[:TIMELINE_ROWS_MD]:
            pb, pa = o["before"] or {}, o["after"] or {}
            L.append(f"| `{md_cell(o['op'])}` | {_v(pb.get('calls'))} -> {_v(pa.get('calls'))} | {_v(pb.get('gpu_ms'), 'ms')} | "
                     f"{_v(pa.get('gpu_ms'), 'ms')} | {_v(pb.get('gpu_us_per_call'), 'us')} | {_v(pa.get('gpu_us_per_call'), 'us')} | "
                     f"{presence(o) or _chg(o['gpu_us_per_call'])} |")
        if len(ops) > TIMELINE_ROWS_MD:
            L.append(f"| ... {len(ops) - TIMELINE_ROWS_MD} more (JSON `op_totals`) | | | | | | |")
    return L


def render_json(c: dict, gate_pct=None, reasons=None) -> str:
    return json_text(json.dumps(json_doc(c, gate_pct, reasons), indent=2, ensure_ascii=False, sort_keys=False, default=str)) + "\n"


def _inputs(side) -> str:
    return ", ".join(md_code(i['path']) for i in side["inputs"]) or "(none)"


def render_markdown(c: dict, gate_pct=None, reasons=None) -> str:
    c, reasons = displayable(c), displayable(reasons)  # names from the inputs shown, never run (text_safety)
    L = ["# diagnoser compare", "",
         f"- BEFORE: {_inputs(c['before'])}", f"- AFTER: {_inputs(c['after'])}", ""]
    s = c["summary"]
    L.append("**Findings of BEFORE:** " + ", ".join(f"{s[k]} {k}" for k in ("fixed", "improved", "unchanged", "regressed"))
             + f"; **new in AFTER:** {s['new']}"
             + (f"; **expected next limit** of a fixed kernel: {s['next limit']}." if s.get("next limit") else "."))
    L.append(f"Noise: {c['noise_pct']:.1f}% (the larger step-to-step variation of the two runs: "
             f"BEFORE {c['before']['noise_basis']}, AFTER {c['after']['noise_basis']}).")
    L.append("")
    why_steps = steps_text(c)
    if c["headlines"] or why_steps:
        L += ["## Headline numbers", ""]
    if c["headlines"]:  # the numbers first, then why some are left out
        L += ["| | before | after | change | |", "|---|---|---|---|---|"]
        for h in c["headlines"]:
            L.append(f"| {h['label']} | {_v(h['before'], h['unit'])} | {_v(h['after'], h['unit'])} | {_chg(h)} | "
                     f"{ARROW.get(h.get('moved'), '')} |")
        L.append("")
    if why_steps:
        L += [why_steps, ""]
    if c.get("kernel_totals"):
        L += _totals_md(c) + [""]
    if c["findings"]:
        L += ["## Findings", "", "| verdict | rule | category | severity before -> after | why | Verify |",
              "|---|---|---|---|---|---|"]
        for f in c["findings"]:
            sev = f"{f.get('severity_before') or '-'} -> {f.get('severity_after') or '-'}"
            L.append(f"| **{f['verdict']}** | `{f['rule']}` | {f['category']} | {sev} | {md_cell(f.get('why', ''))} | "
                     f"{md_cell(_verify_text(f))} |")
        L.append("")
        for f in c["findings"]:
            subs = f.get("subjects") or []
            if subs:
                kind = next((x[k]["kind"] for x in subs for k in ("before", "after") if x.get(k)), "subject")
                L += [f"`{f['rule']}` per {kind}:", "", f"| verdict | {kind} before | {kind} after |", "|---|---|---|"]
                for sj in subs[:KERNEL_ROWS_MD]:
                    L.append(f"| {sj['verdict']} | {_subj(sj['before'])} | {_subj(sj['after'])} |")
                if len(subs) > KERNEL_ROWS_MD:
                    L.append(f"| ... | {len(subs) - KERNEL_ROWS_MD} more | |")
                L.append("")
                nexts = [sj for sj in subs if sj.get("why")]
                if nexts:
                    L += [f"- {_subj(sj['after'])}: {md_cell(sj['why'])}" for sj in nexts[:KERNEL_ROWS_MD]] + [""]
    if c["kernels"]:
        L += ["## Kernels (matched by name and launch configuration)", "",
              "| kernel | launch before -> after | duration before | after | change | SM % | memory % |",
              "|---|---|---|---|---|---|---|"]
        for k in c["kernels"][:KERNEL_ROWS_MD]:
            d = k["duration_us"]
            ids = f"#{(k['before'] or {}).get('id', '-')} -> #{(k['after'] or {}).get('id', '-')}"
            if k.get("config_changed"):
                ids += " (launch configuration changed)"
            sm, mem = k["sm_throughput_pct"], k["memory_throughput_pct"]
            L.append(f"| {md_cell(md_code(k['name']))} | {ids} | {_v(d.get('before'), 'us')} | {_v(d.get('after'), 'us')} | "
                     f"{_chg(d)} | {_v(sm[0])} -> {_v(sm[1])} | {_v(mem[0])} -> {_v(mem[1])} |")
        if len(c["kernels"]) > KERNEL_ROWS_MD:
            L.append(f"| ... {len(c['kernels']) - KERNEL_ROWS_MD} more (JSON lists all) | | | | | | |")
        L.append("")
    if c.get("timeline_kernels"):
        L += ["## Timeline kernels (per steady step, matched by name and launch configuration)", "",
              "| kernel | grid x block before -> after | ms/step before | after | change | launches/step |",
              "|---|---|---|---|---|---|"]
        for k in c["timeline_kernels"][:TIMELINE_ROWS_MD]:
            d = k["ms_per_step"]
            cfg = f"{_cfg(k['before'])} -> {_cfg(k['after'])}"
            lp = k["launches_per_step"]
            L.append(f"| {md_cell(md_code(k['name']))} | {cfg} | {_v(d.get('before'), 'ms')} | {_v(d.get('after'), 'ms')} | "
                     f"{presence(k) or _chg(d)} | {_v(lp[0])} -> {_v(lp[1])} |")
        more = len(c["timeline_kernels"]) - TIMELINE_ROWS_MD
        if more > 0:
            L.append(f"| ... {more} more (JSON `timeline_kernels`) | | | | | |")
        L.append("")
    if c["phases"]:
        L += ["## Steps by phase (median steady step)", "", "| phase | before | after | change |", "|---|---|---|---|"]
        for p in c["phases"]:
            L.append(f"| {p['phase']} | {_v(p['before'], 'ms')} | {_v(p['after'], 'ms')} | {_chg(p)} |")
        L.append("")
    moved = [r for r in c["facts"] if r.get("moved") in ("right", "wrong", "changed") and r["subject"] is None]
    if moved:
        L += ["## Run facts that changed", "", "| fact | before | after | change | |", "|---|---|---|---|---|"]
        for r in moved[:FACT_ROWS_MD]:
            L.append(f"| {r['fact']} | {md_cell(_v(r['before'], r['unit']))} | {md_cell(_v(r['after'], r['unit']))} | "
                     f"{_chg(r)} | {ARROW.get(r['moved'], '')} |")
        more = len(moved) - FACT_ROWS_MD
        same = sum(1 for r in c["facts"] if r["subject"] is None and r.get("moved") == "same")
        apart = sum(1 for r in c["facts"] if r["subject"] is None and r.get("moved") == "steps differ")
        L.append("")
        L.append(f"{same} run facts unchanged" + (f", {more} more changed" if more > 0 else "")
                 + (f", {apart} per-step facts not compared (steps cut differently)" if apart else "")
                 + "; per-kernel and per-rank facts: JSON (`facts`).")
        L.append("")
    if gate_pct is not None:
        L.append(f"## CI gate: --fail-on-regression {gate_pct:g}")
        L.append("")
        noisy = judged(c, gate_pct)
        if reasons:
            L += [f"- FAIL: {r}" for r in reasons]
        elif noisy is None:
            L.append("- pass: no headline number worse by more than the limit, no new or regressed warning.")
        else:
            L.append("- pass: no measure worse beyond max(PCT, its run-to-run noise), no new or regressed warning of the code.")
        L += [f"- {r}" for r in (noisy[1] if noisy else [])]
        L += [f"- not gated: {r}" for r in not_gated(c)]
        L.append("")
    if c["notes"]:
        L += ["## Notes", ""] + [f"- {n}" for n in c["notes"]] + [""]
    st = c.get("settings") or {}
    made = [f"--param {x['pack_param'] if 'pack_param' in x else x.get('rule', x.get('condition')) + '.' + x['param']}="
            f"{x['value']} (default {x['default']})" for x in st.get("params", [])]
    made += [f"--set {x['name']}={x['value']} (default {x['default']})" for x in st.get("settings", [])]
    made += [f"rule pack {x.get('path')}" for x in st.get("rule_packs", [])]
    L += ["---", f"Made by diagnoser {__version__} `compare`; both runs diagnosed with the same rules and settings"
          + (": " + ", ".join(made) + "." if made else " (shipped rules, defaults).")]
    return md_inert(visible_text("\n".join(L) + "\n"))


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
