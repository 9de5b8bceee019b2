"""The side-by-side compare page: the layout is templates/compare.html.j2, the charts comparison/charts.py."""
from __future__ import annotations

from .._version import __version__
from .charts import side_by_side, sol_arrows_chart
from .core import VERDICT_ORDER
from .next_limit import VERDICT as NEXT_LIMIT
from .render import ARROW, _cfg, _chg, _v, _verify_text, json_doc, presence, steps_text

TIMELINE_ROWS = 15  # the costliest timeline kernels shown (JSON: timeline_kernels)
MOVED = {k: v.replace("*", "") for k, v in ARROW.items()}


def compare_view(c: dict, gate_pct=None, reasons=None) -> dict:
    doc = json_doc(c, gate_pct, reasons)
    heads = [dict(h, change_text=_chg(h), moved_text=MOVED.get(h.get("moved"), "")) for h in c["headlines"]]
    findings = [dict(f, verify_text=_verify_text(f), why=f.get("why", "")) for f in c["findings"]]
    kernels = []
    for k in c["kernels"][:40]:
        ids = f"#{(k['before'] or {}).get('id', '-')} \u2192 #{(k['after'] or {}).get('id', '-')}"
        if k.get("config_changed"):
            ids += " (configuration changed)"
        sm, mem = k["sm_throughput_pct"], k["memory_throughput_pct"]
        kernels.append(dict(k, ids=ids, change_text=_chg(k["duration_us"]),
                            sm=f"{_v(sm[0])} \u2192 {_v(sm[1])}", mem=f"{_v(mem[0])} \u2192 {_v(mem[1])}"))
    tkernels = [dict(k, cfg=f"{_cfg(k['before'])} \u2192 {_cfg(k['after'])}",
                     change_text=presence(k) or _chg(k["ms_per_step"]),
                     launches=f"{_v(k['launches_per_step'][0])} \u2192 {_v(k['launches_per_step'][1])}")
                for k in (c.get("timeline_kernels") or [])[:TIMELINE_ROWS]]
    phases = [dict(r, change_text=_chg(r)) for r in c.get("phases") or []]
    totals = [dict(k, change_text=presence(k) or _chg(k["us_per_launch"]),
                   launches_text=f"{_v(k['launches'][0])} \u2192 {_v(k['launches'][1])}",
                   cells=[_v((k[side] or {}).get(key), unit) for key, unit in (("gpu_ms", "ms"), ("us_per_launch", "us"))
                          for side in ("before", "after")])
              for k in (c.get("kernel_totals") or [])[:TIMELINE_ROWS]]
    facts = [dict(r, change_text=_chg(r), moved_text=MOVED.get(r["moved"], "")) for r in c["facts"]
             if r["subject"] is None and r.get("moved") in ("right", "wrong", "changed")]
    return {"version": __version__, "before": c["before"], "after": c["after"], "summary": c["summary"],
            "verdicts": [v for v in VERDICT_ORDER[::-1] if v != NEXT_LIMIT or c["summary"].get(v)],
            "noise_pct": c["noise_pct"], "gate": doc.get("gate"),
            "steps_text": steps_text(c).replace("**", ""), "totals": totals,
            "headlines": heads, "findings": findings, "kernels": kernels, "tkernels": tkernels, "phases": phases, "facts": facts,
            "sol": sol_arrows_chart(c["charts"], c["kernels"]), "pairs": side_by_side(c["charts"]),
            "notes": c["notes"]}


def render_html(c: dict, gate_pct=None, reasons=None) -> str:
    from ..report.template_env import template_env
    from ..text_safety import displayable, visible_text
    view = compare_view(displayable(c), gate_pct, displayable(reasons))
    return visible_text(template_env(True).get_template("compare.html.j2").render(view=view))
