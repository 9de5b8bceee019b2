"""Safe and bounded on every surface (issue 31): JUnit, progress lines, the -o path, the library API,
ranks claimed twice, raw HTML in Markdown.

Every hostile input is synthetic-from-real: a real fixture with a kernel, op or file name rewritten to
carry C0 controls, an OSC 52 clipboard write, a screen clear, a bidi override, U+FFFE/U+FFFF or an
HTML tag; or a real trace copied under a name that claims a rank twice.
"""
from __future__ import annotations

import gzip
import json
import mmap
import os
import pty
import re
import select
import shutil
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from io import StringIO
from pathlib import Path

import pytest
from click.testing import CliRunner

from diagnoser.cli import cli
from diagnoser.pipeline import diagnose
from diagnoser.report.render import render_report

REPO = Path(__file__).resolve().parents[1]
FIX = REPO / "fixtures"
# C0 controls (NUL aside: no file or CSV cell holds one), ESC/BEL of an OSC 52 clipboard write, a
# screen clear, a bidi override, the two non-characters XML 1.0 forbids, and an HTML tag
HOSTILE = "\x01\x02\x08\x0b\x0c\x1b]52;c;aWQ=\x07\x1b[2J\u202e\ufffe\uffff<script>alert(1)</script>"
FILE_HOSTILE = HOSTILE.replace("/", "")  # a file name holds no `/`
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufffe\uffff"
                 "\ud800-\udfff]")
SGR = re.compile(r"\x1b\[[0-9;]*m")  # the terminal report's own colours


def raw_controls(text: str) -> list[str]:
    return [hex(ord(c)) for c in RAW.findall(SGR.sub("", text))]


def synthetic_hostile_ncu_csv(tmp_path: Path) -> Path:
    """fixtures/ncu/k_cuda.raw.csv.gz with one kernel renamed (as `ncu --print-kernel-base` shows a renamed kernel)."""
    text = gzip.open(FIX / "ncu/k_cuda.raw.csv.gz", "rt").read()
    path = tmp_path / "synthetic_hostile.raw.csv"
    path.write_text(text.replace('"transpose_tile_unpadded"', '"transpose_tile' + HOSTILE.replace('"', "") + '"'))
    return path


def synthetic_hostile_torch(tmp_path: Path, name: str = "synthetic_hostile.pt.trace.json.gz") -> Path:
    """fixtures/torch/host_sync.pt.trace.json.gz with every op and kernel name given the hostile tail."""
    trace = json.load(gzip.open(FIX / "torch/host_sync.pt.trace.json.gz"))
    for e in trace["traceEvents"]:
        if e.get("cat") in ("cpu_op", "kernel") and isinstance(e.get("name"), str):
            e["name"] = e["name"] + HOSTILE
    path = tmp_path / name
    with gzip.open(path, "wt") as f:
        json.dump(trace, f)
    return path


# ---------------------------------------------------------------- 1. JUnit is well-formed XML

def test_synthetic_hostile_names_leave_junit_well_formed_and_every_format_escaped(tmp_path):
    named = tmp_path / f"synthetic_run{FILE_HOSTILE}.pt.trace.json.gz"  # a trace file named with \x01, OSC 52...
    shutil.copy(FIX / "torch/host_sync.pt.trace.json.gz", named)
    for path in (synthetic_hostile_ncu_csv(tmp_path), synthetic_hostile_torch(tmp_path), named):
        for fmt in ("junit", "md", "html", "terminal", "json"):
            result = CliRunner().invoke(cli, [str(path), "--format", fmt, "--no-progress"])
            assert result.exit_code == 0, result.output
            assert raw_controls(result.output) == [], (path.name, fmt)
            if fmt == "junit":
                root = ET.fromstring(result.output.encode("utf-8"))  # well-formed XML 1.0
                assert root.tag == "testsuites" and int(root.get("tests")) > 0
            if fmt == "json":  # escaped in the text, every value as read
                doc = json.loads(result.output)
                assert doc["inputs"][0]["path"] == str(path)
    xml = CliRunner().invoke(cli, [str(named), "--format", "junit", "--no-progress"]).output
    assert "synthetic_run\\x01\\x02" in xml and "\\ufffe\\uffff" in xml  # the name is there, shown escaped


# ---------------------------------------------------------------- 2. progress lines on a terminal

def _run_on_a_terminal(args: list[str], cwd: Path) -> str:
    """`diagnose ARGS` with stdin, stdout and stderr on a pseudo-terminal; everything it wrote."""
    leader, follower = pty.openpty()
    env = dict(os.environ, COLUMNS="120", PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from diagnoser.cli import main; main(sys.argv[1:])",
                             *args], stdin=follower, stdout=follower, stderr=follower, cwd=cwd, env=env)
    os.close(follower)
    out = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 120)
        if not ready:
            proc.kill()
            break
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: the command ended
            break
        if not chunk:
            break
        out += chunk
    proc.wait(timeout=60)
    os.close(leader)
    return out.decode("utf-8", "replace")


def test_synthetic_hostile_rank_file_names_reach_the_terminal_escaped_in_progress_lines(tmp_path):
    for rank in (0, 1):
        shutil.copy(FIX / f"torch/ddp_straggler.rank{rank}.pt.trace.json.gz",
                    tmp_path / f"synthetic{FILE_HOSTILE}.rank{rank}.pt.trace.json.gz")
    (tmp_path / f"synthetic{FILE_HOSTILE}.rank2.pt.trace.json.gz").write_bytes(b"not a trace")
    out = _run_on_a_terminal([".", "--progress", "--jobs", "1"], tmp_path)
    assert "[1/3] synthetic\\x01" in out and "FAILED" in out  # the per-rank lines, the names escaped
    assert "\x1b]52" not in out and "\x1b[2J" not in out and raw_controls(out.replace("\r", "")) == []


def test_reading_progress_shows_a_hostile_file_name_escaped():
    from diagnoser.progress import Progress
    stream = StringIO()
    bar = Progress(f"reading synthetic{FILE_HOSTILE}.pickle", total=2.0, interval=0.0, stream=stream)
    bar.update(1.0)
    bar.close()
    assert "reading synthetic\\x01" in stream.getvalue() and raw_controls(stream.getvalue().replace("\r", "")) == []


# ---------------------------------------------------------------- 3. -o never names an input

@pytest.mark.parametrize("how", ["same name", "another spelling", "symbolic link", "hard link", "in a folder input"])
def test_output_that_is_an_input_is_refused_and_the_input_kept(tmp_path, how):
    trace = tmp_path / "t.pt.trace.json.gz"
    shutil.copy(FIX / "torch/host_sync.pt.trace.json.gz", trace)
    before = trace.read_bytes()
    target, inputs = str(trace), [str(trace)]
    if how == "another spelling":
        target = str(tmp_path / "." / "t.pt.trace.json.gz")
    elif how == "symbolic link":
        target = str(tmp_path / "report.md")
        os.symlink(trace, target)
    elif how == "hard link":
        target = str(tmp_path / "report.md")
        os.link(trace, target)
    elif how == "in a folder input":
        inputs = [str(tmp_path)]
    result = CliRunner().invoke(cli, [*inputs, "-o", target, "--format", "md"])
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1, result.output
    assert "is the input" in result.output and trace.read_bytes() == before


def test_compare_and_playbook_never_write_over_an_input(tmp_path):
    trace = tmp_path / "t.pt.trace.json.gz"
    shutil.copy(FIX / "torch/host_sync.pt.trace.json.gz", trace)
    rules = tmp_path / "synthetic_rules.yaml"
    shutil.copy(next((REPO / "rules").glob("*.yaml")), rules)
    kept = trace.read_bytes(), rules.read_bytes()
    compared = CliRunner().invoke(cli, ["compare", str(trace), "--to", str(trace), "-o", str(trace)])
    handbook = CliRunner().invoke(cli, ["playbook", "--rules", str(rules), "-o", str(rules)])
    for result in (compared, handbook):
        assert result.exit_code == 1 and "is the input" in result.output, result.output
    assert (trace.read_bytes(), rules.read_bytes()) == kept


# ---------------------------------------------------------------- 5. the library keeps the process's limits

def test_library_reads_a_snapshot_without_touching_the_callers_address_space_limit(monkeypatch):
    import resource
    calls = []
    real = resource.setrlimit
    monkeypatch.setattr(resource, "setrlimit", lambda *a: (calls.append(a), real(*a)))
    failures, done = [], threading.Event()

    def allocate():  # another thread of the same process (a notebook, a server): 1 GiB of address space at a time
        while not done.is_set():
            try:
                mmap.mmap(-1, 1 << 30).close()
            except (OSError, MemoryError, ValueError) as e:
                failures.append(e)

    before = resource.getrlimit(resource.RLIMIT_AS)
    other = threading.Thread(target=allocate)
    other.start()
    try:
        for _ in range(3):
            report = diagnose([str(FIX / "mem/small_leak.snapshot.pickle.gz")])
            assert report.findings
    finally:
        done.set()
        other.join()
    assert calls == [] and failures == [] and resource.getrlimit(resource.RLIMIT_AS) == before


def test_library_refuses_a_synthetic_pickle_bomb_in_its_child_process(tmp_path):
    from diagnoser.errors import InputError
    from diagnoser.ingest.mem_snapshot import load_snapshot
    bomb = tmp_path / "synthetic_claim.snapshot.pickle.gz"  # PROTO 5, BYTEARRAY8 of 64 GiB, inside gzip
    bomb.write_bytes(gzip.compress(b"\x80\x05\x96" + (1 << 36).to_bytes(8, "little") + b"xx."))
    with pytest.raises(InputError) as err:
        load_snapshot(bomb)
    assert str(bomb) in str(err.value) and "pickle" in str(err.value)


# ---------------------------------------------------------------- 6. two files claiming one rank

def test_two_synthetic_traces_claiming_one_rank_are_named_and_the_first_kept(tmp_path):
    rank0 = tmp_path / "synthetic_dup.rank0.pt.trace.json.gz"
    shutil.copy(FIX / "torch/ddp_straggler.rank0.pt.trace.json.gz", rank0)
    trace = json.load(gzip.open(rank0))  # distributedInfo.rank 0, under a rank-1 name, other bytes
    trace["traceName"] = "synthetic copy"
    rank1 = tmp_path / "synthetic_dup.rank1.pt.trace.json.gz"
    with gzip.open(rank1, "wt") as f:
        json.dump(trace, f)
    report = diagnose([str(rank0), str(rank1)])
    note = next(n for n in report.notes if "claim rank 0" in n)
    assert f"{rank0} (kept: the first given) and {rank1} (left out)" in note
    assert [i["path"] for i in report.inputs] == [str(rank0)]
    assert any("cover 1 of 2 ranks" in n for n in report.notes)
    swapped = diagnose([str(rank1), str(rank0)])  # the rule: the first given
    assert [i["path"] for i in swapped.inputs] == [str(rank1)]


# ---------------------------------------------------------------- 7. no raw HTML in Markdown

def test_markdown_report_carries_no_raw_html_from_synthetic_names(tmp_path):
    from markdown_it import MarkdownIt
    viewer = MarkdownIt("commonmark", {"html": True}).enable("table")  # a viewer that passes HTML through
    tag = "<img src=x onerror=alert(1)>"
    for rank in (0, 1):  # file names in the captions and the rank notes
        trace = json.load(gzip.open(FIX / f"torch/ddp_straggler.rank{rank}.pt.trace.json.gz"))
        trace.pop("distributedInfo")
        with gzip.open(tmp_path / f"synthetic{tag}.rank{rank}.pt.trace.json.gz", "wt") as f:
            json.dump(trace, f)
    ranks = sorted(str(p) for p in tmp_path.glob("synthetic*.rank*"))
    for paths in ([str(synthetic_hostile_torch(tmp_path))], [str(synthetic_hostile_ncu_csv(tmp_path))], ranks):
        md = render_report(diagnose(paths), "md", top=1)
        html = viewer.render(md)
        assert "<script" not in html and "<img" not in html, paths
        assert "\\x01" in md or "\\<img src=x" in md  # the names are shown: in code spans, or escaped


# ---------------------------------------------------------------- a SIGTERM inside the rule engine (found by the fuzz)

def test_a_signal_landing_inside_durable_rules_goes_on_up_not_into_a_rule_error():
    """durable_rules catches BaseException around its actions and hands it to the completion callback:
    a SIGTERM there (limits.Terminated) must end the command as 'terminated', not as 'rule action
    failed: Terminated(15)' with durable's logged traceback (fuzz: ncu-rep case killed mid-run)."""
    from diagnoser.engine.durable_backend import _completion
    from diagnoser.limits import Terminated
    errors: list[str] = []
    complete = _completion(errors)
    complete(ValueError("an action's own error"), None)
    assert errors == ["ValueError(\"an action's own error\")"]
    with pytest.raises(Terminated):
        complete(Terminated(15), None)
    with pytest.raises(KeyboardInterrupt):
        complete(KeyboardInterrupt(), None)
