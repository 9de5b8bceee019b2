"""CI slice of the fuzz suite (benchmarks/fuzz.py): mutated real fixtures through the real CLI (piped,
on a pseudo-terminal, as rank 1 of two ranks) and the Python API in a process that does other work.

A fixed seed and 40 cases per reader (240 in all, about a minute on 2 cores): every case must be
reported (exit 0/3, nothing on stderr) or refused on one line naming the file (exit 1); never a
traceback, a hang, over 1 GB, a temp file left (after a SIGTERM mid-run too), the input modified,
a half-written -o or a pickle payload run; every report (md, terminal, html, json, junit, and the
terminal screen with its progress lines) without a raw control, bidi or non-character, JUnit
well-formed XML. The full run (1,000 cases per reader) is `python benchmarks/fuzz.py`.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CASES_PER_READER = 40
SEED = 14


def _fuzz():
    spec = importlib.util.spec_from_file_location("diagnoser_fuzz", REPO / "benchmarks" / "fuzz.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


fuzz = _fuzz()


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    base = fuzz.seeds()
    cases = (c for r in fuzz.READERS for c in fuzz.make_cases(r, CASES_PER_READER, SEED, base))
    return fuzz.run_cases(cases, jobs=2, hang_s=60, root=tmp_path_factory.mktemp("fuzz"))


@pytest.mark.parametrize("reader", fuzz.READERS)
def test_mutated_real_inputs_are_reported_or_refused_on_one_line(outcomes, reader):
    mine = [o for o in outcomes if o.case.reader == reader]
    assert len(mine) == CASES_PER_READER
    bad = [f"#{o.case.index} {o.case.family}: {', '.join(o.problems)} (rc {o.rc}) {o.stderr.strip()[-300:]}"
           for o in mine if o.problems]
    assert not bad, "\n".join(bad)
    # the slice exercises both outcomes: mutations the readers survive and ones they refuse
    assert any(o.rc == 1 for o in mine) and any(o.rc in (0, 3) for o in mine)


def test_the_slice_runs_every_way_and_checks_every_format(outcomes):
    assert {o.case.way for o in outcomes} == {"cli", "tty", "api", "ranks"}
    checked = {fmt for o in outcomes for fmt in o.checked}
    assert checked == {"md", "terminal", "html", "json", "junit", "tty"}, checked
    assert any("]52;c;aWQ=" in o.stderr for o in outcomes if o.case.way == "tty")  # a hostile file name reached the screen (escaped: no raw control)


def test_mutation_families_are_deterministic():
    a = [c.data for c in fuzz.make_cases("mem-snapshot", 12, SEED)]
    b = [c.data for c in fuzz.make_cases("mem-snapshot", 12, SEED)]
    assert a == b and len(set(a)) > 6
