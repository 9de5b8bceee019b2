"""Audit every output as a user sees it: each input (fixtures, ../shared/corpus, ../shared/external,
the rank groups, the compare pairs) diagnosed once and rendered five ways (Markdown, terminal at 100
columns, HTML, JSON, JUnit; a comparison: Markdown, terminal, HTML, JSON), every text checked for
what a user must never see:

  repr       a Python repr: `[(`, a tuple of strings, None, nan, inf, `{'` dict text, `<object`
  svg        an SVG attribute that is not what SVG expects (points lists, coordinates, viewBox)
  html       HTML whose elements do not nest (an unclosed or stray tag)
  junit      JUnit that is not XML 1.0 or breaks the JUnit schema (tests/test_junit_report.py)
  width      a terminal line wider than the width it was given
  notes      a "not evaluated" note for a fact the report shows, or the same note twice

    python benchmarks/audit_outputs.py [--only fixtures|shared|all] [--keep OUT_DIR]

Run it from the repository root; it prints one line per problem and the counts per check, and
exits 1 when a problem is found. tests/test_output_audit.py runs the same checks.
"""
from __future__ import annotations

import argparse
import html.parser
import json
import re
import sys
import time
import warnings
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from render_all import RANK  # noqa: E402

FIXTURES = "fixtures"
SHARED = ("../shared/corpus", "../shared/external")
WIDTH = 100
# before -> after: two runs of one program each (the pairs the docs and tests compare)
COMPARE_PAIRS = [
    (["fixtures/torch/fp32_matmul.pt.trace.json.gz"], ["fixtures/torch/healthy.pt.trace.json.gz"]),
    (["fixtures/nsys/fp32_matmul.sqlite.gz"], ["fixtures/nsys/healthy.sqlite.gz"]),
    (["fixtures/torch/m_train_convnet_fp32.pt.trace.json.gz"], ["fixtures/torch/m_train_convnet_bf16.pt.trace.json.gz"]),
    (["fixtures/torch/p_opt_single_tensor.pt.trace.json.gz"], ["fixtures/torch/p_opt_fused.pt.trace.json.gz"]),
    (["fixtures/torch/m_power_iteration_readback.pt.trace.json.gz"],
     ["fixtures/torch/m_power_iteration_check_every_50.pt.trace.json.gz"]),
    (["fixtures/torch/ddp_straggler.rank0.pt.trace.json.gz", "fixtures/torch/ddp_straggler.rank1.pt.trace.json.gz"],
     ["fixtures/torch/ddp_healthy.rank0.pt.trace.json.gz", "fixtures/torch/ddp_healthy.rank1.pt.trace.json.gz"]),
    (["../shared/external/ncar/MW_noasync.sqlite.gz"], ["../shared/external/ncar/MW_baseline.sqlite.gz"]),
    (["../shared/external/ncar/MW_Baseline.ncu-rep"], ["../shared/external/ncar/MW_DivToMult.ncu-rep"]),
]

# ---------------------------------------------------------------- the checks (text -> problems)

# after nan / inf: a word that is not a unit, or "(": the word in prose ("its NaN checks", "a -inf mask")
PROSE_AFTER = r"(?![\w(`'\"-])(?![ \t]+(?:(?!(?:ms|us|ns|s|GiB|MiB|GB|MB|TB|TFLOP|FLOP|x)\b)[A-Za-z]{2,}|\())"
REPRS = [
    ("list of tuples", re.compile(r"\[\(")),
    ("tuple", re.compile(r"\('[^'\n]*',\)|\('[^'\n]*'(?:, '[^'\n]*')+\)")),
    ("None", re.compile(r"(?<![\w.`'\"-])None(?![\w`'\"-])")),
    # a value, not the word in prose ("its NaN checks", "a -inf mask"): not followed by another word
    ("nan", re.compile(r"(?<![\w.`'\"-])(?:nan|NaN)" + PROSE_AFTER)),
    ("inf", re.compile(r"(?<![\w.`'\"-])-?inf" + PROSE_AFTER)),
    ("dict text", re.compile(r"\{'")),
    ("object repr", re.compile(r"<object")),
]
# code the report quotes (a fix's snippet, a command to paste) is Python on purpose: not checked
CODE_MD = re.compile(r"```.*?```|`[^`\n]*`", re.S)
CODE_ANSI = re.compile(r"\x1b\[1;36;40m.*?\x1b\[0m", re.S)  # rich's inline code style (terminal.py)
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
NUM = r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
POINTS = re.compile(rf"^\s*(?:{NUM}\s*,\s*{NUM}\s*)*$")
NUMERIC_ATTRS = {"x", "y", "x1", "y1", "x2", "y2", "cx", "cy", "r", "width", "height"}
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
OPTIONAL_END = {"p", "li", "html", "body", "head", "tr", "td", "th", "thead", "tbody", "dt", "dd", "option"}


def repr_problems(text: str, where: str, code: bool = False) -> list[str]:
    """`code`: the text holds Markdown code spans, left out of the check."""
    if code:
        text = CODE_MD.sub("`code`", text)
    out = []
    for name, pat in REPRS:
        for m in pat.finditer(text):
            line = text[text.rfind("\n", 0, m.start()) + 1:text.find("\n", m.end()) if "\n" in text[m.end():] else None]
            out.append(f"{where}: {name}: {line.strip()[:160]}")
            break  # one line per kind is enough to act on
    return out


def json_problems(text: str, where: str) -> list[str]:
    bad = []
    doc = json.loads(text, parse_constant=lambda c: bad.append(c))
    out = [f"{where}: JSON holds {c} (not JSON)" for c in sorted(set(bad))]
    strings: list[str] = []

    def walk(x):
        if isinstance(x, str):
            strings.append(x)
        elif isinstance(x, dict):
            for k, v in x.items():
                walk(k)
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
    walk(doc)
    return out + repr_problems("\n".join(strings), where, code=True)


class _Html(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.problems: list[str] = []
        self.text: list[str] = []
        self.skip = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("polyline", "polygon") and not POINTS.match(a.get("points") or ""):
            self.problems.append(f"svg: <{tag} points={a.get('points')!r:.120}>")
        for k in NUMERIC_ATTRS & set(a):
            if tag in ("svg", "td", "th", "img", "table", "col", "canvas", "iframe"):
                continue
            if not re.fullmatch(NUM + "%?", (a[k] or "").strip()):
                self.problems.append(f"svg: <{tag} {k}={a[k]!r:.80}>")
        if tag == "svg" and "viewbox" in a and not re.fullmatch(rf"\s*{NUM}(?:[\s,]+{NUM}){{3}}\s*", a["viewbox"] or ""):
            self.problems.append(f"svg: <svg viewBox={a['viewbox']!r}>")
        for k, v in a.items():
            if k in ("title", "aria-label", "alt") and v:
                self.text.append(v)
        if tag in ("script", "style", "code", "pre"):
            self.skip += 1
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.stack.pop()

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if tag in ("script", "style", "code", "pre"):
            self.skip = max(0, self.skip - 1)
        if not self.stack or self.stack[-1] != tag:
            # p and li close implicitly; anything else out of order is a broken page
            while self.stack and self.stack[-1] in ("p", "li") and self.stack[-1] != tag:
                self.stack.pop()
            if not self.stack or self.stack[-1] != tag:
                self.problems.append(f"html: </{tag}> closes <{self.stack[-1] if self.stack else 'nothing'}>")
                if tag in self.stack:
                    while self.stack.pop() != tag:
                        pass
                return
        self.stack.pop()

    def handle_data(self, data):
        if not self.skip:
            self.text.append(data)


def html_problems(text: str, where: str) -> list[str]:
    p = _Html()
    p.feed(text)
    p.close()
    out = [f"{where}: {x}" for x in dict.fromkeys(p.problems)]
    unclosed = [t for t in p.stack if t not in OPTIONAL_END]
    if unclosed:
        out.append(f"{where}: html: unclosed <{'> <'.join(unclosed[-5:])}>")
    return out + repr_problems("\n".join(p.text), where)


def junit_problems(text: str, where: str) -> list[str]:
    from test_junit_report import check_junit_schema
    try:
        root = ET.fromstring(text.encode())
    except ET.ParseError as e:
        return [f"{where}: junit: not XML 1.0: {e}"]
    try:
        check_junit_schema(root)
    except AssertionError as e:
        return [f"{where}: junit: schema: {e}"]
    body = "\n".join(filter(None, [*(el.text for el in root.iter()), *(v for el in root.iter() for v in el.attrib.values())]))
    return repr_problems(body, where, code=True)


def terminal_problems(text: str, where: str, width: int = WIDTH) -> list[str]:
    from rich.cells import cell_len
    plain = ANSI.sub("", text)
    wide = [line for line in plain.splitlines() if cell_len(line) > width]
    out = [f"{where}: width: {len(wide)} lines over {width} columns, e.g. {wide[0][:120]!r}"] if wide else []
    return out + repr_problems(ANSI.sub("", CODE_ANSI.sub("`code`", text)), where, code=True)


def notes_problems(report, md: str, where: str) -> list[str]:
    """A rule listed as not evaluated for a fact the report has, a collect-with hint for data the report
    itself shows, and a note (or not-evaluated line) said twice."""
    out = []
    have = {f.name for f in report.facts}
    for ne in report.not_evaluated:
        shown = [m for m in ne.missing if m in have]
        if shown and not ne.subjects:
            out.append(f"{where}: notes: {ne.rule} not evaluated for {', '.join(shown)}, which the report has")
        if "record_shapes" in (ne.collect or "") and "Per-op roofline" in md:
            out.append(f"{where}: notes: {ne.rule} asks to collect with record_shapes=True; the report shows a per-op "
                       "roofline from the recorded shapes")
    seen: dict[str, int] = {}
    for n in report.notes:
        seen[n] = seen.get(n, 0) + 1
    out += [f"{where}: notes: said {k} times: {n[:120]}" for n, k in seen.items() if k > 1]
    lines = [ln.strip() for ln in md.splitlines() if ("not evaluated" in ln or "collect" in ln) and not ln.startswith("|")]
    dup = {ln for ln in lines if lines.count(ln) > 1 and len(ln) > 20}
    out += [f"{where}: notes: line repeated: {ln[:120]}" for ln in sorted(dup)]
    return out


# ---------------------------------------------------------------- rendering

@dataclass
class Audit:
    problems: dict[str, list[str]] = field(default_factory=dict)  # check -> lines
    rendered: int = 0
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, lines: list[str]) -> None:
        for line in lines:
            check = line.split(": ")[1] if ": " in line else "other"
            check = check if check in ("svg", "html", "junit", "width", "notes") else "repr"
            self.problems.setdefault(check, []).append(line)

    def counts(self) -> dict[str, int]:
        return {k: len(v) for k, v in sorted(self.problems.items())}


def input_sets(roots) -> list[list[str]]:
    files = sorted(str(p) for root in roots if Path(root).is_dir() for p in Path(root).rglob("*")
                   if p.is_file() and not p.name.startswith("README"))
    groups: dict[str, list[str]] = {}
    for f in files:
        m = RANK.match(Path(f).name)
        if m:
            groups.setdefault(str(Path(f).parent / f"{m['run']}.{m['ext']}"), []).append(f)
    return [[f] for f in files] + [ps for _, ps in sorted(groups.items()) if len(ps) > 1]


def render_report(rep, keep: Path | None, name: str) -> dict[str, str]:
    """One diagnosis, five renderings."""
    from diagnoser.report.terminal import render_terminal
    from diagnoser.report.text_view import present
    from diagnoser.text_safety import displayable
    texts = {fmt: rep.render(fmt) for fmt in ("md", "html", "json", "junit")}
    texts["terminal"] = render_terminal(present(displayable(rep.report), 10, "info"), width=WIDTH)
    if keep:
        stem = keep / name.replace("../", "")
        stem.parent.mkdir(parents=True, exist_ok=True)
        for fmt, text in texts.items():
            Path(f"{stem}.{fmt}").write_text(text)
    return texts


def check_texts(texts: dict[str, str], where: str) -> list[str]:
    out = []
    for fmt, text in texts.items():
        w = f"{where} [{fmt}]"
        out += {"md": lambda t, w: repr_problems(t, w, code=True), "html": html_problems, "json": json_problems, "junit": junit_problems,
                "terminal": terminal_problems}[fmt](text, w)
    return out


def audit_inputs(sets: list[list[str]], pairs=(), keep: Path | None = None) -> Audit:
    from diagnoser.api import diagnose
    from diagnoser.errors import DiagnoserError
    audit = Audit()
    t0 = time.perf_counter()
    reports = {}
    for paths in sets:
        where = paths[0] if len(paths) == 1 else f"{paths[0]} (+{len(paths) - 1} ranks)"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                rep = diagnose(paths)
        except DiagnoserError as e:
            audit.errors.append(f"{where}: {e}")
            continue
        reports[tuple(paths)] = rep
        texts = render_report(rep, keep, where)
        audit.rendered += 1
        audit.add(check_texts(texts, where))
        audit.add(notes_problems(rep.report, texts["md"], f"{where} [md]"))
    for before, after in pairs:
        if not all(Path(p).exists() for p in before + after):
            continue
        where = f"compare {before[0]} -> {after[0]}"
        try:
            texts = render_comparison(before, after, reports)
        except DiagnoserError as e:
            audit.errors.append(f"{where}: {e}")
            continue
        audit.rendered += 1
        audit.add(check_texts(texts, where))
    audit.seconds = time.perf_counter() - t0
    return audit


def comparison(before, after, reports) -> dict:
    """The comparison of two diagnosed sides (diagnosed once: reused from the audit's reports)."""
    from diagnoser import settings
    from diagnoser.api import diagnose, load_rules
    from diagnoser.comparison.core import build
    sides = []
    for paths in (before, after):
        rep = reports.get(tuple(paths)) or diagnose(paths)
        reports[tuple(paths)] = rep
        sides.append(rep)
    pack = load_rules()
    with settings.overridden(dict(pack.settings)):
        c = build(before, sides[0].report, after, sides[1].report, pack)
        c["settings"] = dict(sides[0].report.settings, settings=settings.changed())
    return c


def render_comparison(before, after, reports) -> dict[str, str]:
    from diagnoser.comparison.html import render_html
    from diagnoser.comparison.render import render_json, render_markdown
    c = comparison(before, after, reports)
    texts = {"md": render_markdown(c), "html": render_html(c), "json": render_json(c)}
    try:
        from diagnoser.comparison.terminal import render_terminal
    except ImportError:  # before issue 30 compare had no terminal view: the command printed the Markdown
        texts["terminal"] = texts["md"]
    else:
        texts["terminal"] = render_terminal(c, width=WIDTH)
    return texts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("fixtures", "shared", "all"), default="all")
    ap.add_argument("--keep", type=Path, help="also write every rendering under this folder")
    args = ap.parse_args(argv)
    roots = {"fixtures": [FIXTURES], "shared": list(SHARED), "all": [FIXTURES, *SHARED]}[args.only]
    pairs = [p for p in COMPARE_PAIRS if any(p[0][0].startswith(r) for r in roots)]
    audit = audit_inputs(input_sets(roots), pairs, args.keep)
    for lines in audit.problems.values():
        for line in lines:
            print(line)
    for e in audit.errors:
        print(f"(refused) {e}")
    print(f"{audit.rendered} inputs and comparisons rendered in {audit.seconds:.0f} s; problems per check: "
          f"{audit.counts() or 'none'}; {len(audit.errors)} refused")
    return 1 if audit.problems else 0


if __name__ == "__main__":
    sys.exit(main())
