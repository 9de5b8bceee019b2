"""Case-blind pattern search (diagnoser/case_blind.py): the lower-cased twin of every re.IGNORECASE pattern
the package searches names with gives the same answer as the pattern itself, on every real name of the
fixtures' traces and on random text; patterns whose twin could differ keep their own search."""
from __future__ import annotations

import functools
import importlib
import pkgutil
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import diagnoser
from diagnoser.case_blind import ascii_lower, found, lower_twin

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _package_patterns() -> list[re.Pattern]:
    """Every case-blind compiled pattern held by a module of the package (lists and tuples of them too, and
    the lazily compiled ones), in a stable order."""
    found_ = {}

    def take(value, depth=0):
        if isinstance(value, re.Pattern):
            if value.flags & re.IGNORECASE:
                found_[(value.pattern, value.flags)] = value
        elif isinstance(value, (list, tuple)) and depth < 2:
            for item in value:
                take(item, depth + 1)
        elif isinstance(value, functools.partial) is False and hasattr(value, "cache_info") and \
                isinstance(getattr(value, "__wrapped__", None), functools.partial) and \
                value.__wrapped__.func is re.compile:
            take(value())  # lazy_pattern

    for info in pkgutil.walk_packages(diagnoser.__path__, "diagnoser."):
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an optional extra not installed
            continue
        for value in vars(module).values():
            take(value)
    return [found_[k] for k in sorted(found_, key=str)]


PATTERNS = _package_patterns()


@functools.lru_cache(maxsize=None)
def _real_names() -> list[str]:
    """The distinct GPU, host and range names of the fixtures' PyTorch traces (real traces)."""
    from diagnoser.ingest.torch_trace import read_torch_trace
    names: set[str] = set()
    for path in sorted((FIXTURES / "torch").glob("*.pt.trace.json*"))[:40]:
        try:
            tl = read_torch_trace(path)
        except Exception:  # the hostile fixtures
            continue
        for table in (tl.gpu, tl.host, tl.ranges):
            if table is not None and len(table):
                names.update(map(str, table["name"].unique()))
    return sorted(names)


def test_the_package_has_case_blind_patterns_and_most_have_twins():
    assert len(PATTERNS) >= 30
    assert sum(lower_twin(p) is not None for p in PATTERNS) >= len(PATTERNS) - 3


def test_real_names_same_answer_as_the_pattern():
    names = _real_names()
    assert len(names) > 500
    mismatches = [(p.pattern[:60], n[:80]) for p in PATTERNS for n in names
                  if found(p, n) != (p.search(n) is not None)]
    assert mismatches == []


ASCII = st.text(alphabet=st.sampled_from(list("abcdefgxyzABCDEFXYZ_0123456789 -[]().:/\\^$|*+?{}<>#\n\tKkSsIi")),
                max_size=60)


@settings(max_examples=300, deadline=None)
@given(prefix=ASCII, suffix=ASCII, i=st.integers(min_value=0))
def test_random_ascii_text_around_real_names(prefix, suffix, i):
    names = _real_names()
    name = names[i % len(names)]
    for text in (prefix, prefix + name + suffix, (prefix + name).upper(), name.swapcase() + suffix):
        for p in PATTERNS:
            assert found(p, text) == (p.search(text) is not None), (p.pattern, text)


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=40))
def test_any_text_falls_back_where_not_ascii(text):
    for p in PATTERNS:
        assert found(p, text) == (p.search(text) is not None)


@pytest.mark.parametrize("source, text, expected", [  # synthetic patterns, one per construct the twin must keep
    (r"gemm|Cijk_", "void CIJK_foo", True),
    (r"[A-F]x", "bX", True),
    (r"[^A-Z]", "AB", False),
    (r"\bconv(?!ert)", "CONVERT", False),
    (r"\W", "A_b", False),
    (r"(?<!finalize_)matmul", "FINALIZE_MATMUL", False),
    (r"_MI\d+x\d+", "_mi16X16", True),
    (r"(ab)\1", "aBAb", True),
])
def test_twin_matches_the_flagged_pattern(source, text, expected):
    pattern = re.compile(source, re.I)
    assert lower_twin(pattern) is not None
    assert (pattern.search(text) is not None) == expected
    assert found(pattern, text) == expected


@pytest.mark.parametrize("source", [r"[A-z]", r"[0-z]", r"\x41", r"\N{LATIN SMALL LETTER A}", r"(?i)a",
                                    r"(?P<Name>a)", r"\u0041", r"(?#c)a"])
def test_no_twin_where_lowering_could_change_the_meaning(source):
    assert lower_twin(re.compile(source, re.I)) is None


def test_case_sensitive_and_bytes_patterns_have_no_twin():
    assert lower_twin(re.compile("Gemm")) is None
    assert lower_twin(re.compile(b"gemm", re.I)) is None


def test_ascii_lower():
    assert ascii_lower("Void GEMM") == "void gemm"
    assert ascii_lower("K\u212a") is None  # the Kelvin sign folds to k: such text keeps the pattern's own search
    assert found(re.compile("kk", re.I), "K\u212a")


def test_names_hits_same_as_the_pattern():
    """timeline.view.Names.hits (the masks every analysis takes) searches lower-cased names with the twins."""
    import pandas as pd

    from diagnoser.timeline.view import Names
    names = _real_names() + ["K\u212aernel", "gemm\u00e9", ""]
    view = Names.of(pd.Series(names + [None], dtype=object))
    for p in PATTERNS:
        expected = [p.search(n) is not None for n in names] + [False]
        assert view.mask(p).tolist() == expected, p.pattern
