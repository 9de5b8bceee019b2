"""The code Python's regular-expression compiler writes for each pattern, kept in the user cache for the
command's own process (as dataclass_code.py keeps the dataclasses' methods).

Every start compiles the same ~250 patterns again (numpy's and pandas' at import, jinja2's, the package's name
and kernel patterns): parsing each and writing its matcher code is ~13 ms of CPU, a tenth of what the command
costs on top of `import pandas`. The same pattern and flags always compile to the same code on one Python build
(the code is all the compiler produces; the engine checks it again when it is loaded), so while
`cached_regex_code()` is active the compiler's last step runs on the code written before: `re.compile` returns the
same pattern object (equal: the same flags and code; the same groups) and re's own cache works as ever. A pattern
is kept only when its parts build the compiler's own pattern again (a Python whose compiler takes other steps
keeps nothing), and once a second run has compiled it: some are built anew by every process (the standard
tokenizer's, which numpy's import runs, joins the members of a set, in an order that changes with each process's
string hashing), and one such pattern a run would grow the file without end; a short digest of every pattern a
run compiles is noted in a small file of its own (the last MAX_SEEN). The files are keyed by the exact Python build
and the engine's code format (`_sre.MAGIC`, `CODESIZE`); a missing, corrupt or foreign file is a miss; a cached
entry the engine refuses is compiled as always; `DIAGNOSER_NO_CACHE=1` turns it off (diagnoser/disk_cache.py). Only
the command's main() turns the cache on: a library caller's patterns are compiled as always.
"""
from __future__ import annotations

import contextlib
import sys
import warnings
import zlib
from array import array

from .disk_cache import cache_dir, dump_marshal, load_marshal

# {(pattern, flags): (flags, code, groups, groupindex, indexgroup)}, the code as the bytes of its CODESIZE-byte
# units (a third of the memory a list of ints holds while the run lasts)
FORMAT = "diagnoser.regex-code/2"
SEEN_FORMAT = "diagnoser.regex-seen/1"  # [digest of each pattern a run compiled, ...], oldest first
MAX_ENTRIES = 4096  # patterns; past this the file starts over with the run's own
MAX_SEEN = 1024  # digests; the oldest go first
CODE_UNIT = "I"  # array type of one unit of matcher code (_sre.CODESIZE bytes)


def _engine():
    """(re._compiler, _sre) where the compiler's steps are the ones this module repeats (CPython 3.11+), else None."""
    try:
        import _sre
        from re import _compiler, _parser
    except ImportError:
        return None
    if not all(hasattr(m, n) for m, n in ((_compiler, "_code"), (_compiler, "compile"), (_parser, "parse"),
                                          (_sre, "compile"), (_sre, "MAGIC"), (_sre, "CODESIZE"))):
        return None
    if array(CODE_UNIT).itemsize != _sre.CODESIZE:
        return None
    return _compiler, _parser, _sre


def _path(sre, kind: str = "code"):
    directory = cache_dir()
    if directory is None:
        return None
    build = f"{sys.implementation.cache_tag}-{sys.hexversion:x}-{sre.MAGIC}-{sre.CODESIZE}"
    return directory / f"regex-{kind}-{build}.marshal"


def _digest(key: tuple) -> int:
    """A short stable digest of (pattern, flags) (repr escapes what UTF-8 cannot hold); a collision only keeps a
    pattern a run early."""
    return zlib.crc32(repr(key).encode("utf-8"))


def _entry_ok(key, value) -> bool:
    return (type(key) is tuple and len(key) == 2 and type(key[0]) in (str, bytes) and type(key[1]) is int
            and type(value) is tuple and len(value) == 5 and type(value[0]) is int and type(value[1]) is bytes
            and type(value[2]) is int and type(value[3]) is dict and type(value[4]) is tuple)


def _load(path) -> dict:
    """{(pattern, flags): compiled parts} from the cache file; {} for a missing, unreadable, corrupt or foreign one."""
    entries = load_marshal(path, FORMAT)
    if not isinstance(entries, dict):
        return {}
    return {k: v for k, v in entries.items() if _entry_ok(k, v)}


def _load_seen(path) -> list:
    seen = load_marshal(path, SEEN_FORMAT)
    return [d for d in seen if type(d) is int] if isinstance(seen, list) else []


def _compiled_parts(compiler, parser, pattern, flags: int) -> tuple:
    """What re._compiler.compile hands the engine for `pattern` (its own steps, in its order), as plain values."""
    parsed = parser.parse(pattern, flags)
    code = compiler._code(parsed, flags)
    groupindex = dict(parsed.state.groupdict)
    indexgroup = [None] * parsed.state.groups
    for name, i in groupindex.items():
        indexgroup[i] = name
    return (int(flags | parsed.state.flags), array(CODE_UNIT, code).tobytes(), parsed.state.groups - 1, groupindex,
            tuple(indexgroup))


def _checked_parts(compiler, parser, sre, pattern, flags: int, compiled) -> tuple | None:
    """The parts to keep for `pattern`: None unless they build a pattern equal to the compiler's own (the same
    flags and code: a Python whose compiler takes other steps than these keeps nothing)."""
    try:
        with warnings.catch_warnings():  # (the compiler has shown the pattern's warnings once already)
            warnings.simplefilter("ignore")
            parts = _compiled_parts(compiler, parser, pattern, flags)
        return parts if _built(sre, pattern, parts) == compiled else None
    except Exception:  # noqa: BLE001 - whatever goes wrong here, the pattern is simply not kept
        return None


def _built(sre, pattern, parts: tuple):
    """The pattern object from its compiled parts (what re._compiler.compile's last step does)."""
    flags, code, groups, groupindex, indexgroup = parts
    units = array(CODE_UNIT)
    units.frombytes(code)
    return sre.compile(pattern, flags, units.tolist(), groups, groupindex, indexgroup)


@contextlib.contextmanager
def cached_regex_code():
    """Within this block, a str or bytes pattern kept before is built from its cached code; when the block ends,
    the patterns compiled here that an earlier run compiled too are kept, the others noted."""
    engine = _engine()
    path = None if engine is None else _path(engine[2])
    if path is None or _ACTIVE:  # no cache, or already active (a nested main)
        yield
        return
    compiler, parser, sre = engine
    original = compiler.compile
    seen_path = _path(sre, "seen")
    known, seen = _load(path), _load_seen(seen_path)
    earlier = set(seen)
    new: dict = {}
    fresh: list = []  # digests of the patterns no earlier run compiled

    def compile_cached(p, flags=0):
        if type(p) not in (str, bytes) or flags & compiler.SRE_FLAG_DEBUG:
            return original(p, flags)
        key = (p, int(flags))
        parts = known.get(key)
        refused = False
        if parts is not None:
            try:
                return _built(sre, p, parts)
            except (RuntimeError, TypeError, ValueError, OverflowError):  # refused by the engine: compiled anew
                refused = True
        compiled = original(p, flags)  # a miss returns the compiler's own pattern (its errors and warnings too)
        digest = _digest(key)
        if refused or digest in earlier:
            parts = _checked_parts(compiler, parser, sre, p, flags, compiled)
            if parts is not None:
                new[key] = parts
        else:
            fresh.append(digest)
        return compiled

    _ACTIVE["compile"] = original
    compiler.compile = compile_cached
    try:
        yield
    finally:
        compiler.compile = _ACTIVE.pop("compile")
        if new:
            dump_marshal(path, FORMAT, {**known, **new} if len(known) + len(new) <= MAX_ENTRIES else new)
        if fresh:
            dump_marshal(seen_path, SEEN_FORMAT, (seen + fresh)[-MAX_SEEN:])


_ACTIVE: dict = {}  # the compiler's own function while a block is active (a nested block leaves it in charge)
