"""Every output as a user sees it (issue 30): each input diagnosed once and rendered five ways
(Markdown, terminal at 100 columns, HTML, JSON, JUnit; comparisons four ways), every text checked
for Python reprs, malformed SVG attributes, HTML that does not nest, JUnit that is not XML 1.0 or
breaks the schema, terminal lines over the width, and "not evaluated" notes for what the report
shows. The checks are benchmarks/audit_outputs.py's (the script renders everything, ../shared too);
the first tests show each check catches the defect it names."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import audit_outputs as audit  # noqa: E402

SHARED = REPO.parent / "shared"


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch):
    monkeypatch.chdir(REPO)  # the inputs are named as the script names them, from the repository root


def test_repr_check_catches_python_reprs_but_not_quoted_code():
    bad = ["points [(1.0, 2.0)]", "refs ('a', 'b')", "ref ('a',)", "20 None ms", "gain nan%", "TFLOP/s inf",
           "{'a': 1}", "<object object>"]
    for text in bad:
        assert audit.repr_problems(text, "x"), text
    assert audit.repr_problems("speed-up nan", "x") and audit.repr_problems("| nan |", "x")
    fine = ["its NaN checks sync the step", "a -inf mask", "`x[:, None]`", "`open('a', 'w')`", "financial", "a (b, c)", "info", "nano"]
    assert [t for t in fine if audit.repr_problems(t, "x", code=True)] == []


def test_svg_html_junit_and_width_checks_catch_broken_output():
    assert audit.html_problems('<svg viewBox="0 0 10 10"><polyline points="[(1, 2)]"></polyline></svg>', "x")
    assert audit.html_problems('<svg viewBox="0 0 10 10"><circle cx="None" cy="1" r="2"></circle></svg>', "x")
    assert audit.html_problems('<svg viewBox="0 0 nan 10"></svg>', "x")
    assert audit.html_problems("<div><span></div>", "x")
    assert not audit.html_problems('<svg viewBox="0 0 10 10"><polyline points="1,2 3.5,4e1"></polyline></svg><p>a', "x")
    assert audit.junit_problems('<?xml version="1.0"?><testsuites><testsuite/></testsuites>', "x")  # no name, counts
    assert audit.junit_problems("<testsuites>\x01</testsuites>", "x")  # not XML 1.0
    assert audit.terminal_problems("\x1b[1m" + "a" * 101 + "\x1b[0m", "x")
    assert not audit.terminal_problems("\x1b[1m" + "a" * 100 + "\x1b[0m", "x")


def _problems(result) -> str:
    lines = [line for v in result.problems.values() for line in v]
    return f"{result.counts()}:\n" + "\n".join(lines[:40])


def test_every_fixture_and_compare_pair_renders_right_in_every_format():
    sets = audit.input_sets([audit.FIXTURES])
    pairs = [p for p in audit.COMPARE_PAIRS if p[0][0].startswith(audit.FIXTURES)
             and all(Path(x).exists() for x in p[0] + p[1])]  # some fixtures are links into ../shared
    assert len(sets) > 100 and len(pairs) >= 4
    result = audit.audit_inputs(sets, pairs)
    assert result.rendered == len(sets) + len(pairs), result.errors
    assert not result.problems, _problems(result)


@pytest.mark.skipif(not (SHARED / "corpus").is_dir(), reason="../shared (corpus, external) is not present")
def test_every_shared_input_and_pair_renders_right_in_every_format():
    sets = audit.input_sets(audit.SHARED)
    pairs = [p for p in audit.COMPARE_PAIRS if p[0][0].startswith("../shared") and all(Path(x).exists() for x in p[0] + p[1])]
    result = audit.audit_inputs(sets, pairs)
    assert result.rendered > 50
    assert not result.problems, _problems(result)
