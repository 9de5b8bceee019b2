"""Names from a trace or the command line cannot escape quoting (issue 20, docs/hostile_input.md).

Every hostile input here is synthetic-from-real: a real fixture with its kernel, op, frame or file
names rewritten to carry an OSC clipboard escape, a bidi override, shell metacharacters, a backtick,
a table pipe and rich markup. Each output format is checked: Markdown, HTML and the terminal show no
control character raw; Markdown tables and code spans keep their shape; the terminal draws `[bold]`
as text; the suggested ncu command, run by bash with `ncu` stubbed, gets the name as one argument,
runs nothing else, and its regex still matches the kernel's demangled name.
"""
from __future__ import annotations

import gzip
import json
import pickle
import re
import shlex
import shutil
import sqlite3
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

from diagnoser.cli import cli
from diagnoser.pipeline import diagnose
from diagnoser.report.render import render_report
from diagnoser.rulespec.expr import render_template
from diagnoser.text_safety import (FACT_TEXT_LIMIT, displayable, md_code, open_quote, regex_any_of, shell_fill,
                                   visible_line)

FIX = Path(__file__).resolve().parents[1] / "fixtures"
# an OSC 52 clipboard write, a bidi override, rich markup, shell metacharacters, a backtick, a table pipe
HOSTILE = "\x1b]52;c;aWQ=\x07[bold]Fwd\u202e';id;'`|$(id)"
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
SGR = re.compile(r"\x1b\[[0-9;]*m")  # the terminal report's own colours


def _raw_controls(text: str, terminal: bool = False) -> list[str]:
    return [hex(ord(c)) for c in RAW.findall(SGR.sub("", text) if terminal else text)]


def _hostile_nsys(tmp_path: Path) -> Path:
    """fixtures/nsys/naive_attention.sqlite.gz with its softmax kernel renamed (StringIds rewritten)."""
    out = tmp_path / "hostile_attention.sqlite"
    with gzip.open(FIX / "nsys/naive_attention.sqlite.gz") as f, open(out, "wb") as g:
        shutil.copyfileobj(f, g)
    con = sqlite3.connect(out)
    con.execute("update StringIds set value = replace(value, 'cunn_SoftMaxForwardReg', ?)", ("cunn_SoftMax" + HOSTILE,))
    con.commit()
    con.close()
    return out


def _hostile_torch(tmp_path: Path) -> Path:
    """fixtures/torch/host_sync.pt.trace.json.gz with every op and kernel name given a hostile tail."""
    trace = json.load(gzip.open(FIX / "torch/host_sync.pt.trace.json.gz"))
    for e in trace["traceEvents"]:
        if e.get("cat") in ("cpu_op", "kernel") and isinstance(e.get("name"), str):
            e["name"] = e["name"] + "<blink>" + HOSTILE
    out = tmp_path / "hostile_host_sync.pt.trace.json.gz"
    with gzip.open(out, "wt") as f:
        json.dump(trace, f)
    return out


def _reports(path) -> dict[str, str]:
    report = diagnose([str(path)])
    return {fmt: render_report(report, fmt, top=10) for fmt in ("md", "html", "terminal", "json")}


def _ncu_command(fix: str) -> str:
    """The `ncu ...` code span of a fix, as CommonMark reads it (a run of N backticks closes it)."""
    m = re.search(r"(?<!`)(`+)(?!`) ?(ncu .*?) ?(?<!`)\1(?!`)", fix)
    assert m, fix
    return m.group(2)


def _table_shapes_hold(md: str) -> None:
    """Every Markdown table row has as many unescaped `|` as its header."""
    lines = md.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^\|(-{3}:?\|)+$|^\|(-{3,}:?\|)+$", line.replace("---:", "---")):
            pipes = len(re.findall(r"(?<!\\)\|", lines[i - 1]))
            for row in lines[i + 1:]:
                if not row.startswith("|"):
                    break
                assert len(re.findall(r"(?<!\\)\|", row)) == pipes, row


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags = set()

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)


def test_hostile_kernel_name_in_an_nsys_export_reaches_no_output_raw(tmp_path):
    out = _reports(_hostile_nsys(tmp_path))
    for fmt in ("md", "html", "terminal"):
        assert _raw_controls(out[fmt], fmt == "terminal") == [], fmt
    assert "cunn_SoftMax" in out["md"] and "\\x1b]52" in out["md"]  # the name is there, its escape shown
    _table_shapes_hold(out["md"])
    assert "[bold]Fwd" in SGR.sub("", out["terminal"])  # rich markup in a name stays text
    assert "\x1b" not in out["json"] and json.loads(out["json"])["findings"]


def test_top_kernels_row_holds_a_hostile_name_in_one_code_span(tmp_path):
    md = _reports(_hostile_nsys(tmp_path))["md"]
    row = next(line for line in md.splitlines() if line.startswith("|") and "Fwd" in line and "x 1024" in line)
    cell = re.split(r"(?<!\\)\|", row)[1].strip()
    fence = re.match(r"`+", cell).group(0)
    assert cell.endswith(fence) and fence not in cell[len(fence):-len(fence)]  # opened once, closed once


def test_suggested_ncu_command_keeps_a_hostile_name_one_argument(tmp_path):
    path = _hostile_nsys(tmp_path)
    report = json.loads(_reports(path)["json"])
    fix = next(f["fix"] for f in report["findings"] if "-k regex:" in f["fix"])
    command = _ncu_command(fix)
    words = shlex.split(command)
    plain = shlex.split(_ncu_command(next(f.fix for f in diagnose([str(FIX / "nsys/naive_attention.sqlite.gz")]).findings
                                          if "-k regex:" in f.fix)))
    assert len(words) == len(plain) and words[0] == "ncu"  # the same shape as for the real names
    pattern = words[words.index("-k") + 1].removeprefix("regex:")
    con = sqlite3.connect(path)
    names = [v for (v,) in con.execute("select value from StringIds where value like 'void %cunn_SoftMax%Fwd%'")]
    assert names and all(re.search(pattern, n) for n in names)  # --kernel-name-base demangled still lands
    assert "\\" not in pattern and '"' not in pattern  # nothing the rule engine rewrites
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash to paste the command into")
    ran = subprocess.run([bash, "-c", 'ncu() { printf "%s\\0" "$@"; }; id() { echo RAN-ID; }; ' + command],
                         capture_output=True, text=True, timeout=30)
    assert ran.returncode == 0 and "RAN-ID" not in ran.stdout
    assert ran.stdout.split("\0")[:-1] == words[1:]  # bash passed exactly the words shlex sees
    assert _ncu_command(next(line for line in _reports(path)["md"].splitlines() if "-k regex:" in line)) == command


def test_hostile_op_and_kernel_names_in_a_torch_trace(tmp_path):
    out = _reports(_hostile_torch(tmp_path))
    for fmt in ("md", "html", "terminal"):
        assert _raw_controls(out[fmt], fmt == "terminal") == [], fmt
    _table_shapes_hold(out["md"])
    assert "aten::" in out["md"] and "Fwd" in out["md"]
    tags = _Tags()
    tags.feed(out["html"])
    assert "blink" not in tags.tags and "&lt;blink&gt;" in out["html"]  # HTML shows the name as text


def _rename_frames(frames) -> None:
    for frame in frames or []:
        if frame.get("filename", "").endswith("scenarios.py"):
            frame["filename"] = frame["filename"][:-3] + HOSTILE + ".py"
            frame["name"] = frame["name"] + HOSTILE


def test_hostile_frame_names_in_a_memory_snapshot(tmp_path):
    """fixtures/mem/small_leak.snapshot.pickle.gz with the program's own frames (file and function) renamed."""
    snap = pickle.load(gzip.open(FIX / "mem/small_leak.snapshot.pickle.gz"))
    for trace in snap["device_traces"]:
        for event in trace:
            _rename_frames(event.get("frames"))
    for segment in snap["segments"]:
        _rename_frames(segment.get("frames"))
        for block in segment["blocks"]:
            _rename_frames(block.get("frames"))
    path = tmp_path / "hostile_leak.snapshot.pickle.gz"
    with gzip.open(path, "wb") as f:
        pickle.dump(snap, f)
    out = _reports(path)
    for fmt in ("md", "html", "terminal"):
        assert _raw_controls(out[fmt], fmt == "terminal") == [], fmt
    assert "scenarios\\x1b]52" in out["md"] or "scenarios?]52" in out["md"]  # the frame is named, escaped
    _table_shapes_hold(out["md"])


def test_hostile_kernel_names_in_an_ncu_csv(tmp_path):
    text = gzip.open(FIX / "ncu/k_cuda.raw.csv.gz", "rt").read()
    path = tmp_path / "hostile_k_cuda.raw.csv"
    path.write_text(text.replace('"transpose_tile_unpadded"', '"transpose_tile' + HOSTILE.replace('"', "") + '"'))
    out = _reports(path)
    for fmt in ("md", "html", "terminal"):
        assert _raw_controls(out[fmt], fmt == "terminal") == [], fmt
    assert "transpose_tile" in out["md"]
    _table_shapes_hold(out["md"])


def test_input_path_with_control_characters_is_shown_escaped(tmp_path):
    path = tmp_path / "run\x1b]0;title\x07\u202e`|.pt.trace.json.gz"
    shutil.copy(FIX / "torch/host_sync.pt.trace.json.gz", path)
    for fmt in ("md", "html", "terminal"):
        result = CliRunner().invoke(cli, [str(path), "--format", fmt, "--no-progress"])
        assert result.exit_code == 0, result.output
        assert _raw_controls(result.output, fmt == "terminal") == [], fmt
    md = CliRunner().invoke(cli, [str(path), "--format", "md", "--no-progress"]).output
    line = next(line for line in md.splitlines() if line.startswith("- ") and "run\\x1b]0;title" in line)
    assert line.startswith("- ``") and "\\u202e" in line  # one code span, the backtick inside it
    missing = CliRunner().invoke(cli, [str(tmp_path / "gone\x1b]0;x\x07.sqlite")])
    assert missing.exit_code == 1 and _raw_controls(missing.output) == [] and "gone" in missing.output
    assert len(missing.output.strip().splitlines()) == 1


def test_facts_and_compare_show_hostile_names_escaped(tmp_path):
    path = _hostile_nsys(tmp_path)
    facts = CliRunner().invoke(cli, ["facts", str(path)])
    assert facts.exit_code == 0 and _raw_controls(facts.output) == [] and "cunn_SoftMax" in facts.output
    for fmt in ("md", "html"):
        result = CliRunner().invoke(cli, ["compare", str(FIX / "nsys/naive_attention.sqlite.gz"), "--to", str(path),
                                          "--format", fmt])
        assert result.exit_code == 0, result.output
        assert _raw_controls(result.output) == [] and "cunn_SoftMax" in result.output, fmt
    _table_shapes_hold(CliRunner().invoke(cli, ["compare", str(FIX / "nsys/naive_attention.sqlite.gz"), "--to",
                                                str(path)]).output)


def test_rule_text_places_each_value_for_where_it_lands():
    text = ("The top kernel {k} takes 40%. Run `ncu -k regex:'{r}' --launch-count {n:.0f} python train.py` "
            "or `ncu -k {k}`; see `{k}`.")
    out = render_template(text, {"k": "a`b;$(id)\x1b[2J", "r": "x';id;'", "n": 3.0})
    prose, rest = out.split(" takes", 1)
    assert prose == "The top kernel a\\`b;$(id)\\x1b[2J"  # a lone backtick escaped, the control shown
    single = re.search(r"regex:(\S+)", rest).group(1)
    assert shlex.split(single) == ["x';id;'"]
    assert "ncu -k 'a`b;$(id)\\x1b[2J'``" in out and "``a`b;$(id)\\x1b[2J``" in out  # widened spans
    ordinary = "The top kernel gemm takes 40%. Run `ncu -k regex:'gemm|conv' --launch-count 3 python train.py`"
    assert render_template(ordinary.replace("gemm|conv", "{r}").replace("3 python", "{n:.0f} python")
                           .replace("kernel gemm", "kernel {k}"), {"k": "gemm", "r": "gemm|conv", "n": 3.0}) == ordinary
    assert render_template("`ncu --launch-skip {absent:.0f}`", {}) == "`ncu --launch-skip n/a`"
    assert render_template("uses `{m}` here", {"m": "use `x` and `y`"}) == "uses `` use `x` and `y` `` here"


def test_text_safety_primitives():
    assert md_code("plain<float>") == "`plain<float>`"
    assert md_code("a``b") == "```a``b```" and md_code("`x") == "`` `x ``"
    assert visible_line("a\x9b31mb\u202ec\nd") == "a\\x9b31mb\\u202ec\\nd"
    assert open_quote("ncu -k regex:'a") == "'" and open_quote("ncu 'a' \"b") == '"' and open_quote("a\\'") is None
    assert shlex.split("x " + shell_fill("a b;$(id)", None)) == ["x", "a b;$(id)"]
    assert shlex.split('x "pre' + shell_fill("a\"b$(id)", '"') + '"') == ["x", 'prea"b$(id)']
    names = ["k" * 150, "m" * 150, "a.b(c)"]
    pattern = regex_any_of(names)
    assert len(pattern) <= FACT_TEXT_LIMIT and re.search(pattern, names[0]) and re.compile(pattern)
    assert re.fullmatch(regex_any_of(["a.b(c)|$[x]^\\\"\x1b"]), "a.b(c)|$[x]^\\\"\x1b")


def test_ordinary_reports_pass_the_boundary_untouched():
    """Real names (C++ templates, lambdas, paths): displayable hands back the very same report."""
    for rel in ("torch/host_sync.pt.trace.json.gz", "nsys/naive_attention.sqlite.gz", "ncu/small_kernels.ncu-rep.gz",
                "mem/o_knn_cdist.snapshot.pickle.gz"):
        report = diagnose([str(FIX / rel)])
        assert displayable(report) is report, rel


def test_nsys_rep_export_hint_quotes_the_file_name():
    from diagnoser.ingest.nsys_rep import export_command
    words = shlex.split(export_command(Path("/x/run;rm -rf ~.nsys-rep.gz")))
    assert words[:3] == ["gunzip", "-k", "/x/run;rm -rf ~.nsys-rep.gz"] and words[-1] == "/x/run;rm -rf ~.nsys-rep"
    assert export_command(Path("run.nsys-rep")) == "nsys export --type sqlite -o run.sqlite run.nsys-rep"
    # the folder is kept and a name that starts with `-` keeps its `./` (else it pastes as an option)
    assert export_command(Path("runs/a.nsys-rep")) == "nsys export --type sqlite -o runs/a.sqlite runs/a.nsys-rep"
    assert shlex.split(export_command(Path("--x.nsys-rep")))[-3:] == ["-o", "./--x.sqlite", "./--x.nsys-rep"]


def test_the_rules_in_force_are_left_as_they_are_and_junit_still_shows_a_hostile_rule_escaped():
    """A report's rules (DiagnosisReport.rules: NOT_SHOWN) are not walked for the text formats, which never read
    them; JUnit, which names every rule, shows a hostile rule name escaped all the same."""
    import dataclasses

    import diagnoser
    report = diagnoser.diagnose(str(FIX / "torch/host_sync.pt.trace.json.gz"))
    first = report.findings[0].rule
    rules = [dataclasses.replace(r, name=r.name + HOSTILE) if r.id == first else r for r in report.rules]
    report = dataclasses.replace(report, rules=rules)
    assert displayable(report).rules is report.rules
    junit = report.render("junit")
    assert _raw_controls(junit) == [] and "\\x1b]52" in junit
    for fmt in ("md", "html", "terminal", "json"):
        assert HOSTILE not in report.render(fmt), fmt
