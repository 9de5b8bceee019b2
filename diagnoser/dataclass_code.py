"""The methods the dataclass decorator writes (__init__, __repr__, __eq__, ...) compiled once and kept in
the user cache, for the command's own process.

The decorator writes each method's source and compiles it every time a module defining a dataclass is
imported: ~250 methods, ~0.04 s of CPU, a third of what the command's own imports cost on top of pandas.
The same source always compiles to the same code (what Python's bytecode cache relies on for modules, and
jinja2's for the compiled templates kept beside this one), so while `cached_dataclass_code()` is active the
decorator's `exec` of a source seen before runs the code compiled then. The cache is keyed by the exact
source text, the bytecode format (importlib's magic number) and the optimization level; a missing,
corrupt or foreign file is a miss; `DIAGNOSER_NO_CACHE=1` turns it off (diagnoser/disk_cache.py). Only
the command's main() turns it on, for its own run: a library caller's dataclasses are compiled as always.
"""
from __future__ import annotations

import builtins
import contextlib
import dataclasses
import importlib.util
import sys
import types

from .disk_cache import cache_dir, dump_marshal, load_marshal

FORMAT = "diagnoser.dataclass-code/2"  # {"format", "value": {source: code}} (disk_cache.dump_marshal)
MAX_ENTRIES = 4096  # sources; past this the file starts over with the run's own (methods of other versions)


def _path():
    directory = cache_dir()
    if directory is None:
        return None
    return directory / f"dataclass-code-{importlib.util.MAGIC_NUMBER.hex()}-O{sys.flags.optimize}.marshal"


def _load(path) -> dict:
    """{source: code} from the cache file; {} for a missing, unreadable, corrupt or foreign one."""
    code = load_marshal(path, FORMAT)
    if not isinstance(code, dict):
        return {}
    return {s: c for s, c in code.items() if type(s) is str and type(c) is types.CodeType}


@contextlib.contextmanager
def cached_dataclass_code():
    """Within this block, dataclasses created here run the cached code of each method whose source was
    compiled before (compiled as the decorator compiles it: no inherited __future__ flags); the methods
    compiled for the first time are added to the cache when the block ends."""
    path = _path()
    if path is None or "exec" in vars(dataclasses):  # no cache, or already active (a nested main)
        yield
        return
    known = _load(path)
    new: dict = {}

    def exec_cached(source, globals=None, locals=None):
        if type(source) is not str:
            return builtins.exec(source, globals, locals)
        code = known.get(source)
        if code is None:
            code = new[source] = compile(source, "<string>", "exec", dont_inherit=True)
        return builtins.exec(code, globals, locals)

    dataclasses.exec = exec_cached  # the module's own global comes before the builtin
    try:
        yield
    finally:
        del dataclasses.exec
        if new:
            dump_marshal(path, FORMAT, {**known, **new} if len(known) + len(new) <= MAX_ENTRIES else new)
