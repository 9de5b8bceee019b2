"""The command's cache of the code dataclasses generates: a class made with it, cold or warm, is the class
made without it (the same code in each method, the same behaviour); a bad cache file is a miss; nothing
outlives the block."""
from __future__ import annotations

import dataclasses
import marshal
from dataclasses import dataclass, field

import pytest

from diagnoser import dataclass_code


def _make():
    """Dataclasses of every shape the package uses: plain, frozen, with defaults and factories, ordered, slotted."""
    @dataclass
    class Plain:
        name: str
        value: float = 1.5
        tags: list = field(default_factory=list)

    @dataclass(frozen=True)
    class Frozen:
        a: int
        b: tuple = ()

    @dataclass(order=True, slots=True)
    class Ordered:
        x: int
        y: str = "y"

    return Plain, Frozen, Ordered


def _methods(cls) -> dict:
    return {name: fn.__code__ for name, fn in vars(cls).items() if callable(fn) and hasattr(fn, "__code__")}


def test_classes_made_with_the_cache_cold_or_warm_are_the_classes_made_without_it(user_cache):
    plain = _make()
    with dataclass_code.cached_dataclass_code():
        cold = _make()
    files = list(user_cache.glob("dataclass-code-*.marshal"))
    assert len(files) == 1
    written = files[0].stat().st_mtime_ns
    with dataclass_code.cached_dataclass_code():
        warm = _make()
    assert files[0].stat().st_mtime_ns == written, "a warm block compiles nothing new, so writes nothing"
    for before, *after in zip(plain, cold, warm):
        for cls in after:
            assert _methods(cls) == _methods(before)
            assert cls.__init__.__annotations__ == before.__init__.__annotations__
    Plain, Frozen, Ordered = warm
    p = Plain("n")
    assert p == Plain("n", 1.5, [])
    assert repr(p).endswith("Plain(name='n', value=1.5, tags=[])")
    assert Plain("n").tags is not Plain("n").tags
    with pytest.raises(dataclasses.FrozenInstanceError):
        Frozen(1).a = 2
    assert hash(Frozen(1)) == hash(Frozen(1))
    assert Ordered(1) < Ordered(2) and not hasattr(Ordered(1), "__dict__")


def test_the_package_classes_imported_with_the_cache_have_the_code_of_those_imported_without(user_cache):
    """The package's own dataclasses (their modules imported in a fresh process): without the block, in a
    cold block, in a warm one: each method's code and each __init__'s annotations are the same."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    probe = ("import contextlib, sys\n"
             "from diagnoser.dataclass_code import cached_dataclass_code\n"
             "with (cached_dataclass_code() if sys.argv[1] == 'on' else contextlib.nullcontext()):\n"
             "    from diagnoser import findings, result_tables, facts\n"
             "    from diagnoser.timeline import intervals, measure\n"
             "def sig(c):\n"
             "    return (c.co_code.hex(), c.co_names, c.co_varnames, c.co_flags, c.co_argcount, c.co_kwonlyargcount,\n"
             "            tuple(sig(k) if hasattr(k, 'co_code') else const(k) for k in c.co_consts))\n"
             "def const(k):  # a frozenset constant (3.13's frozen __delattr__ tests `name in {...}`) by its elements:\n"
             "    return repr(sorted(k, key=repr)) if isinstance(k, frozenset) else repr(k)  # marshal may reorder them\n"
             "out = []\n"
             "for mod in (findings, result_tables, facts, intervals, measure):\n"
             "    for name, cls in sorted(vars(mod).items()):\n"
             "        if isinstance(cls, type) and cls.__module__ == mod.__name__ and hasattr(cls, '__dataclass_fields__'):\n"
             "            for m, fn in sorted(vars(cls).items()):\n"
             "                c = getattr(fn, '__code__', None)\n"
             "                if c is not None:\n"
             "                    out.append((name, m, sig(c), repr(fn.__annotations__)))\n"
             "print(len(out), repr(out))\n")
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(root), DIAGNOSER_CACHE_DIR=str(user_cache), PYTHONHASHSEED="0")
    env.pop("DIAGNOSER_NO_CACHE", None)

    def methods(mode):
        got = subprocess.run([sys.executable, "-c", probe, mode], env=env, capture_output=True, text=True)
        assert got.returncode == 0, got.stderr[-2000:]
        return got.stdout

    plain = methods("off")
    assert int(plain.split()[0]) > 50  # the classes' methods were seen
    assert not list(user_cache.glob("dataclass-code-*"))
    assert methods("on") == plain  # cold: compiled and written
    assert list(user_cache.glob("dataclass-code-*"))
    assert methods("on") == plain  # warm: read back


def test_a_corrupt_or_foreign_cache_file_is_a_miss_and_is_written_over(user_cache):
    with dataclass_code.cached_dataclass_code():
        _make()
    (path,) = user_cache.glob("dataclass-code-*.marshal")
    for bad in (b"not marshal", marshal.dumps([1, 2]), marshal.dumps({"format": "other", "value": {}}),
                marshal.dumps({"format": dataclass_code.FORMAT, "value": {"def f(): pass": "not code"}}),
                marshal.dumps({"format": dataclass_code.FORMAT, "value": ["not", "a", "dict"]})):
        path.write_bytes(bad)
        with dataclass_code.cached_dataclass_code():
            made = _make()
        assert [_methods(c) for c in made] == [_methods(c) for c in _make()]
        assert dataclass_code._load(path), "rewritten with the block's own code"


def test_nothing_outlives_the_block_and_no_cache_means_none(user_cache, monkeypatch):
    with dataclass_code.cached_dataclass_code():
        assert "exec" in vars(dataclasses)
        with dataclass_code.cached_dataclass_code():  # nested: the outer one stays in charge
            pass
        assert "exec" in vars(dataclasses)
    assert "exec" not in vars(dataclasses)
    with pytest.raises(RuntimeError):
        with dataclass_code.cached_dataclass_code():
            raise RuntimeError("an error inside")
    assert "exec" not in vars(dataclasses)
    for f in user_cache.glob("dataclass-code-*"):
        f.unlink()
    monkeypatch.setenv("DIAGNOSER_NO_CACHE", "1")
    with dataclass_code.cached_dataclass_code():
        assert "exec" not in vars(dataclasses)
        _make()
    assert not list(user_cache.glob("dataclass-code-*"))
