"""The report drawn for a terminal (rich): coloured severities, tables, emphasis.

Used when stdout is a TTY (or with `--format terminal`); piped output stays plain Markdown. It
draws the same view as the Markdown template (text_view.present), so both say the same things.
"""
from __future__ import annotations

import io
import re
import shutil

from rich import box
from rich.console import Console, Group
from rich.markdown import Markdown
from rich.padding import Padding
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from ..ingest.sniff import display_kind
from .formatting import fmt_value, share_pct

SEVERITY_STYLE = {"critical": "bold white on red", "warning": "bold black on yellow", "info": "bold white on blue"}
MAX_WIDTH = 120
MAX_WORD = 30  # a table column is at least as wide as its longest word, up to this (then it folds)


def _console(width: int | None = None) -> Console:
    if width is None:
        width = min(MAX_WIDTH, shutil.get_terminal_size((100, 24)).columns)
    return Console(file=io.StringIO(), force_terminal=True, color_system="standard", width=width,
                   highlight=False, emoji=False, soft_wrap=False, markup=False)  # `[bold]` in a name is text


def _md(text: str) -> Markdown:
    return Markdown(text or "", code_theme="ansi_dark", inline_code_lexer=None)


def markdown_console_text(text: str, width: int | None = None) -> str:
    """Markdown rendered for a terminal `width` columns wide (default: the terminal's, at most MAX_WIDTH)."""
    con = _console(width)
    con.print(_md(text))
    return con.file.getvalue()


def _finding(v: dict, width: int) -> Group:
    f = v["f"]
    parts = []
    head = Text()
    head.append(f" {f.severity.upper()} ", style=SEVERITY_STYLE[f.severity])
    head.append(f"  {v['i']}. {f.title}", style="bold")
    parts.append(head)
    meta = f"{f.rule} {f.name} · {f.category} · {f.tree}"
    if v["kernels"]:
        meta += f" · {v['kernels']['kernels']} kernels, {f.count} launches"
    elif v["label"]:
        meta += f" · {v['label']}" + (f": {v['name']}" if v["name"] else "") + (f" · {f.count} launches" if f.count > 1 else "")
    parts.append(Text(meta, style="dim"))
    if v["severity_note"]:
        parts.append(_md(f"_{v['severity_note']}._"))
    lead = f"{v['kernels']['kernels']} kernels show this; the costliest: " if v["kernels"] else ""
    parts.append(Padding(_md(lead + f.message), (1, 0, 0, 0)))
    if v["kernels"]:
        kt = Table(show_edge=False, header_style="bold", pad_edge=False)
        columns = v["kernels"]["columns"][:max(0, (width - 64) // 12)]  # as many facts as the width holds
        kt.add_column("kernel", no_wrap=True, overflow="ellipsis", max_width=32)
        for name in ["first launch", "launches", "gain"]:
            kt.add_column(name.replace(" ", "\n"), justify="right")
        for name in columns:  # fact names wrap at their underscores
            kt.add_column(name.replace("_", " "), justify="right", min_width=max(map(len, name.split("_"))))
        for r in v["kernels"]["rows"]:
            kt.add_row(r["kernel"], r["first"], str(r["launches"]), r["gain"], *r["cells"][:len(columns)])
        more = v["kernels"]["more"]
        if more:
            kt.add_row(Text(f"{more['kernels']} more kernels", style="dim"), "", str(more["launches"]), more["gain"],
                       *[""] * len(columns))
        parts.append(Padding(kt, (1, 0, 0, 2)))
    if f.evidence:
        et = Table(show_header=False, show_edge=False, box=None, pad_edge=False, padding=(0, 2, 0, 0))
        et.add_column("fact", style="cyan", no_wrap=True)
        et.add_column("value", overflow="fold")
        for name, ev in f.evidence.items():
            et.add_row(name, fmt_value(ev["value"], ev.get("unit", "")))
        parts.append(Padding(et, (1, 0, 0, 2)))
    if f.estimated_gain > 0:
        gain = Text("Estimated gain: up to ")
        gain.append(f"{share_pct(f.estimated_gain)} of {f.gain_of}", style="bold green")
        if v["gain_note"]:
            gain.append(f"; {v['gain_note'].replace('`', '')}", style="dim")
        parts.append(Padding(gain, (1, 0, 0, 0)))
    if v.get("predicted"):
        parts.append(Text.assemble("Predicted after the fix: ", (v["predicted"], "bold green")))
    parts.append(Padding(_md(f"**Fix:** {f.fix}"), (1, 0, 0, 0)))
    parts.append(Padding(_md(f"**Verify:** {f.verify}"), (1, 0, 0, 0)))
    parts.append(Text(f"Playbook: {v['playbook']}", style="dim"))
    return Group(*parts)


_TRAILING = re.compile(r"[ ]+((?:\x1b\[[0-9;]*m)*)$|(?<=[ ])((?:\x1b\[[0-9;]*m)+)[ ]+$", re.M)


def _text(con: Console) -> str:
    """The console's output without the padding rich puts at the end of lines."""
    text, before = con.file.getvalue(), None
    while text != before:  # spaces and escape codes may alternate at a line's end
        before, text = text, _TRAILING.sub(lambda m: m.group(1) or m.group(2) or "", text)
    return text


def _first_fix(con: Console, findings: list[dict]) -> None:
    if findings and findings[0]["f"].severity != "info":
        top = findings[0]["f"]
        first = Text.assemble(("First fix: ", "bold"), (top.title, "bold"), f" ({top.category}")
        if top.estimated_gain > 0:
            first.append(f", up to {share_pct(top.estimated_gain)} of {top.gain_of}", style="green")
        first.append(")")
        if top.tied_first and len(findings) > 1 and findings[1]["f"].rule == top.tied_first:
            other = findings[1]["f"]  # two causes of one size: both are the first fix
            first.append(" and, of the same size, ")
            first.append(other.title, style="bold")
            first.append(f" ({other.category}")
            if other.estimated_gain > 0:
                first.append(f", up to {share_pct(other.estimated_gain)} of {other.gain_of}", style="green")
            first.append(")")
        con.print(first)
    elif findings:
        con.print("No warning or critical finding: nothing here is holding this workload back by our rules.")


def fit_widths(columns: list[list[str]], width: int, gap: int) -> list[int]:
    """Column widths for cells that wrap between words, never inside one: each column at least its
    longest word (up to MAX_WORD), the room left shared by how much more each column's text would take."""
    low = [min(MAX_WORD, max((len(w) for c in col for w in c.split()), default=1)) for col in columns]
    high = [max(max((len(c) for c in col), default=1), lo) for col, lo in zip(columns, low)]
    room = width - gap * (len(columns) - 1)
    if sum(high) <= room:
        return high
    spare, want = max(0, room - sum(low)), sum(h - lo for h, lo in zip(high, low))
    widths = [lo + (spare * (h - lo)) // want for h, lo in zip(high, low)]
    return widths


def _tables(con: Console, part: dict) -> None:
    """The measurement tables of `part` (top kernels and ops, the memory breakdown), as the Markdown has them."""
    for t in part.get("tables") or ():
        con.print()
        con.print(Rule(t["title"], style="dim"))
        con.print(Text(t["caption"], style="dim"))
        table = Table(show_edge=False, header_style="bold", pad_edge=False, box=box.SIMPLE_HEAD, padding=(0, 1))
        columns = [[h, *(str(row[i]) for row in t["rows"])] for i, h in enumerate(t["headers"])]
        for h, numeric, w in zip(t["headers"], t["numeric"], fit_widths(columns, con.width, gap=3)):
            table.add_column(h, overflow="fold", justify="right" if numeric else "left", width=w)
        for row in t["rows"]:
            table.add_row(*[str(c) for c in row])
        con.print(table)


def _findings(con: Console, part: dict) -> None:
    """The findings of `part` (the report view, or one run's section) in full, then the rest as a table."""
    for v in part["findings"]:
        con.print()
        con.print(Rule(style="dim"))
        con.print(_finding(v, con.width))
    if part["more"]:
        con.print()
        con.print(Rule(f"{len(part['more'])} more findings (--top N shows more in full)", style="dim"))
        mt = Table(show_edge=False, header_style="bold", pad_edge=False)
        for name in ("#", "severity", "rule", "finding", "subject", "gain"):
            mt.add_column(name, overflow="fold", justify="right" if name in ("#", "gain") else "left")
        for m in part["more"]:
            f = m["f"]
            mt.add_row(str(m["i"]), Text(f.severity, style=SEVERITY_STYLE[f.severity].replace("bold ", "").split(" on ")[0]),
                       f.rule, f.title, m["subject"].replace("\\|", "|"), m["gain"])
        con.print(mt)


def render_terminal(view: dict, width: int | None = None) -> str:
    """The report view (text_view.present) as ANSI text for a terminal."""
    report, counts = view["report"], view["counts"]
    con = _console(width)
    con.print(Rule("diagnoser report", style="bold"))
    for i in report.inputs:
        con.print(Text.assemble(("  input  ", "dim"), (i["path"], "bold"), (f"  ({display_kind(i['kind'])})", "dim")))
    con.print()
    if report.findings:
        summary = Text.assemble(("Summary: ", "bold"), (f"{counts['critical']} critical", "bold red"), ", ",
                                (f"{counts['warning']} warning", "bold yellow"), ", ", (f"{counts['info']} info", "blue"))
        if view["runs"]:
            summary.append(f" over the {len(view['runs'])} runs")
        if view["hidden"]:
            summary.append(f" ({view['hidden']} below {view['min_severity']} left out)", style="dim")
        con.print(summary)
        if not view["runs"]:
            _first_fix(con, view["findings"])
            if view.get("predicted_all"):
                con.print(Text.assemble("All the fixes together (each part of the step counted once): ",
                                        (view["predicted_all"], "green")))
    else:
        con.print(Text("Summary: no findings. No rule fired on these inputs.", style="bold"))
    if view["runs"]:  # several separate runs: one section each
        for part in view["runs"]:
            con.print()
            con.print(Rule(f"run {part['run']}: {', '.join(part['inputs'])}", style="bold"))
            if part["headline"]:
                con.print(Text(f"Measured: {part['headline']}", style="dim"))
            if part["findings"]:
                _first_fix(con, part["findings"])
            elif not part["more"]:
                con.print(Text("No finding in this run.", style="dim"))
            _findings(con, part)
            _tables(con, part)
    else:
        _findings(con, view)
        _tables(con, view)
    if report.not_evaluated:
        con.print()
        con.print(Rule("Not evaluated", style="dim"))
        nt = Table(show_header=False, show_edge=False, box=None, pad_edge=False, padding=(0, 1, 0, 2))
        nt.add_column("rule", style="bold", no_wrap=True)
        nt.add_column("what")
        for n in report.not_evaluated:
            lead = f"{n.title}: not decided on {n.subjects}, which lack " if n.subjects else f"{n.title}: needs "
            line = Text.assemble(lead, (", ".join(n.missing), "cyan"))
            if n.collect:
                line.append(f"; collect it with: {n.collect}", style="dim")
            nt.add_row(n.rule, line)
        con.print(nt)
    if getattr(report, "not_applicable", None):
        con.print()
        con.print(Rule("Not applicable", style="dim"))
        at = Table(show_header=False, show_edge=False, box=None, pad_edge=False, padding=(0, 1, 0, 2))
        at.add_column("rule", style="bold", no_wrap=True)
        at.add_column("why")
        for n in report.not_applicable:
            at.add_row(n.rule, Text.assemble(f"{n.title}: ", (n.reason, "dim")))
        con.print(at)
    if report.notes:
        con.print()
        con.print(Rule("Notes", style="dim"))
        for note in report.notes:
            con.print(Padding(Text(f"- {note}"), (0, 0, 0, 2)))
    con.print()
    if view["settings"]:
        con.print(Text(f"Made by diagnoser {view['version']} with:", style="dim"))
        for line in view["settings"]:
            con.print(Text(f"  - {line.replace('`', '')}", style="dim"))
    else:
        con.print(Text(f"Made by diagnoser {view['version']} with the shipped rules, default thresholds and settings.",
                       style="dim"))
    return _text(con)


def render_markdown_text(text: str, width: int | None = None) -> str:
    """Any Markdown (a playbook section) drawn for a terminal."""
    con = _console(width)
    con.print(_md(text))
    return _text(con)
