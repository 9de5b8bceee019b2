"""The command's cache of the regular-expression compiler's code: a pattern compiled with it, cold or warm, is
the pattern compiled without it (equal: the same flags and matcher code; the same groups, and the same
matches); a bad cache file or entry is a miss; nothing outlives the block."""
from __future__ import annotations

import marshal
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from diagnoser import regex_code

# every shape the compiler treats apart: flags given as RegexFlag or int, inline flags, named and numbered
# groups, look-around, case-blind Unicode and ASCII, bytes (with LOCALE), sets, repeats, backreferences
PATTERNS = [
    (r"^([^()]+\.py)\(\d+\): (.*)$", 0),
    (r"(?P<kind>gemm|conv)_(?P<m>\d+)x(?P<n>\d+)", re.IGNORECASE),
    (r"(?i)ﬀ|straße", 0),
    (r"(?x) \b sm(?P<arch>\d{2,3}) [a-z]? \b  # an arch", 0),
    (r"(?<=cuda)(Launch|Memcpy)(?!Async)", re.ASCII | re.IGNORECASE),
    (r"(a)(b)?\2\1", re.MULTILINE | re.DOTALL),
    (rb'"traceEvents"\s*:\s*\[', 0),
    (rb"[\x00-\x1f]+", re.LOCALE),
    (r"[^\W\d_]{3,}?|x{2,5}+", 0),
]
TEXTS = ["foo.py(12): forward", "GEMM_128x64 conv_3x3", "STRASSE ﬀ", "sm90a", "cudaLaunchKernel cudaMemcpyAsync",
         "abba\nab", "héllo xxxxxx", ""]


def _compile_all():
    re.purge()  # re's own cache would answer before the compiler is reached
    return [re.compile(p, f) for p, f in PATTERNS]


def _behaviour(pats):
    out = []
    for p in pats:
        for t in TEXTS:
            text = t.encode("utf-8") if isinstance(p.pattern, bytes) else t
            out.append([(m.span(), m.groups(), m.groupdict()) for m in p.finditer(text)])
    return out


def test_patterns_compiled_with_the_cache_cold_or_warm_are_the_patterns_compiled_without_it(user_cache):
    plain = _compile_all()
    with regex_code.cached_regex_code():
        first = _compile_all()
    assert not list(user_cache.glob("regex-code-*")), "one run's patterns are only noted"
    assert len(regex_code._load_seen(next(user_cache.glob("regex-seen-*.marshal")))) >= len(PATTERNS)
    with regex_code.cached_regex_code():
        second = _compile_all()
    (path,) = user_cache.glob("regex-code-*.marshal")
    assert len(regex_code._load(path)) >= len(PATTERNS), "a second run's are kept"
    written = path.stat().st_mtime_ns
    with regex_code.cached_regex_code():
        warm = _compile_all()
    assert path.stat().st_mtime_ns == written, "a warm block compiles nothing new, so writes nothing"
    for before, *after in zip(plain, first, second, warm):
        for p in after:
            assert p == before  # CPython compares the flags and the matcher code
            assert (p.pattern, p.flags, p.groups, p.groupindex) == (before.pattern, before.flags, before.groups,
                                                                    before.groupindex)
    assert _behaviour(first) == _behaviour(second) == _behaviour(warm) == _behaviour(plain)


def test_a_pattern_built_anew_by_every_run_is_never_kept_and_the_notes_stay_bounded(user_cache, monkeypatch):
    monkeypatch.setattr(regex_code, "MAX_SEEN", 16)
    for i in range(12):  # like the tokenizer's pattern: its alternatives in another order each process
        with regex_code.cached_regex_code():
            _compile_all()
            re.compile("|".join(f"w{(i * 7 + j) % 13}" for j in range(13)))
    (path,) = user_cache.glob("regex-code-*.marshal")
    assert set(regex_code._load(path)) == {(p, int(f)) for p, f in PATTERNS}
    assert len(regex_code._load_seen(next(user_cache.glob("regex-seen-*.marshal")))) == 16


def test_errors_and_warnings_of_a_bad_pattern_are_the_compilers(user_cache):
    with regex_code.cached_regex_code():
        re.purge()
        with pytest.raises(re.error, match="missing \\)"):
            re.compile("(unclosed")
        with pytest.warns(FutureWarning):
            re.compile("[[a]")  # "possible nested set"


def test_the_commands_own_patterns_from_the_cache_are_those_compiled_without_it(tmp_path):
    """A real run of the command (numpy's, pandas', jinja2's and the package's patterns): every entry it writes
    builds the pattern a fresh compile gives."""
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(root), DIAGNOSER_CACHE_DIR=str(tmp_path))
    env.pop("DIAGNOSER_NO_CACHE", None)
    for _ in range(2):  # kept from the second run on
        got = subprocess.run([sys.executable, "-m", "diagnoser.cli",
                              str(root / "fixtures/torch/host_sync.pt.trace.json.gz"), "--format", "json"],
                             env=env, capture_output=True, text=True)
        assert got.returncode == 0, got.stderr[-2000:]
    (path,) = tmp_path.glob("regex-code-*.marshal")
    entries = regex_code._load(path)
    assert len(entries) > 100
    import _sre
    for (pattern, flags), parts in entries.items():
        re.purge()
        assert regex_code._built(_sre, pattern, parts) == re.compile(pattern, flags), pattern


def test_a_corrupt_or_foreign_cache_file_or_entry_is_a_miss_and_is_written_over(user_cache):
    for _ in range(2):
        with regex_code.cached_regex_code():
            _compile_all()
    (path,) = user_cache.glob("regex-code-*.marshal")
    good = regex_code._load(path)
    key = (PATTERNS[0][0], 0)
    flags, code, groups, groupindex, indexgroup = good[key]
    refused = {key: (flags, b"\xff\xff\x00\x00" * 3, groups, groupindex, indexgroup)}  # code the engine refuses
    for bad in (b"not marshal", marshal.dumps([1, 2]), marshal.dumps({"format": "other", "value": good}),
                marshal.dumps({"format": regex_code.FORMAT, "value": {"pattern": "not parts"}}),
                marshal.dumps({"format": regex_code.FORMAT, "value": refused})):
        path.write_bytes(bad)
        with regex_code.cached_regex_code():
            made = _compile_all()
        assert made == _compile_all()
        assert regex_code._load(path)[key] == good[key], "rewritten with the block's own code"


def test_nothing_outlives_the_block_and_no_cache_means_none(user_cache, monkeypatch):
    from re import _compiler
    original = _compiler.compile
    with regex_code.cached_regex_code():
        patched = _compiler.compile
        assert patched is not original
        with regex_code.cached_regex_code():  # nested: the outer one stays in charge
            assert _compiler.compile is patched
        assert _compiler.compile is patched
    assert _compiler.compile is original
    with pytest.raises(RuntimeError):
        with regex_code.cached_regex_code():
            raise RuntimeError("an error inside")
    assert _compiler.compile is original
    for f in user_cache.glob("regex-code-*"):
        f.unlink()
    monkeypatch.setenv("DIAGNOSER_NO_CACHE", "1")
    with regex_code.cached_regex_code():
        assert _compiler.compile is original
        _compile_all()
    assert not list(user_cache.glob("regex-code-*"))


def test_parts_that_do_not_build_the_compilers_own_pattern_are_never_kept(user_cache, monkeypatch):
    """As on a Python whose compiler takes other steps: the parts are checked against its own pattern."""
    real = regex_code._compiled_parts

    def other_steps(*args):
        flags, code, groups, groupindex, indexgroup = real(*args)
        return flags ^ re.DOTALL, code, groups, groupindex, indexgroup

    monkeypatch.setattr(regex_code, "_compiled_parts", other_steps)
    for _ in range(3):
        with regex_code.cached_regex_code():
            made = _compile_all()
        assert made == _compile_all()  # what a miss returns is the compiler's own
    assert not list(user_cache.glob("regex-code-*")), "nothing kept"
