"""The compiled-pack cache: validated rule files, keyed by their bytes, so start-up skips the YAML
parse and the schema checks (~0.2-0.8 s) for rule files seen before.

Entries live in the user cache directory (diagnoser/disk_cache.py: JSON, never a pickle; every failure
falls back to parsing the file; `DIAGNOSER_NO_CACHE=1` turns it off). The pack the shipped files build
(no user pack, no --param: what most runs load) is kept whole as well, as marshal of plain values (its
rules, conditions and variants as tuples of their fields: no code), so start-up does not rebuild and
re-check the same rules on every run (~8 ms of the ~10 ms load). The key hashes the rule file's
text, the fact names it was checked against, and the loader's own source, so an edited rule file,
catalogue or loader never reads a stale entry.
"""
from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

from .. import disk_cache
from .._version import __version__
from . import model

FORMAT = "diagnoser.rule-cache/1"
_LOADER_SOURCES = ("loader.py", "schema.py", "model.py", "expr.py", "cache.py")
_loader_digest: str | None = None


def _loader() -> str:
    global _loader_digest
    if _loader_digest is None:
        h = hashlib.sha256(f"{FORMAT} {__version__}".encode())
        here = Path(__file__).resolve().parent
        for name in _LOADER_SOURCES:
            try:
                h.update((here / name).read_bytes())
            except OSError:
                h.update(name.encode())
        _loader_digest = h.hexdigest()
    return _loader_digest


def key(text: str, fact_names: list[str] | None) -> str:
    h = hashlib.sha256(_loader().encode())
    h.update(b"\0facts\0" + ("\n".join(fact_names).encode() if fact_names is not None else b"<none>"))
    h.update(b"\0text\0" + text.encode("utf-8"))
    return h.hexdigest()[:40]


def get(k: str) -> dict | None:
    return disk_cache.get("rules", FORMAT, k)


def put(k: str, value: dict) -> None:
    disk_cache.put("rules", FORMAT, k, value)


# ---------------------------------------------------------------- the built shipped pack

PACK_FORMAT = "diagnoser.rule-pack/2"  # disk_cache.dump_marshal's entry (/1: a tuple of its own)
_PACK_KIND = "rule-pack"
_rulespec_digest: str | None = None


def _rulespec() -> str:
    """Every rulespec module's source (the checks and the param values' sanitizing too, beside the loader) and the
    version (what _loader hashes of the loader's own sources is in it: a pack read from the cache needs no _loader)."""
    global _rulespec_digest
    if _rulespec_digest is None:
        h = hashlib.sha256(f"{PACK_FORMAT} {__version__}".encode())
        for path in sorted(Path(__file__).resolve().parent.glob("*.py")):
            try:
                h.update(path.name.encode() + b"\0" + path.read_bytes())
            except OSError:
                h.update(path.name.encode())
        _rulespec_digest = h.hexdigest()
    return _rulespec_digest


def pack_key(folder: str, texts: list[tuple[str, str]], fact_names: list[str] | None) -> str:
    """The key of the pack built from the shipped rule files alone (no user pack, no --param): their folder
    (each rule records its file), each file's name and text, the facts they were checked against and the
    rulespec code that built and checked them."""
    h = hashlib.sha256(f"{PACK_FORMAT}\0{_rulespec()}\0{folder}".encode())
    for name, text in texts:
        h.update(b"\0file\0" + name.encode() + b"\0" + hashlib.sha256(text.encode("utf-8")).digest())
    h.update(b"\0facts\0" + ("\n".join(fact_names).encode() if fact_names is not None else b"<none>"))
    return h.hexdigest()[:40]


def _pack_path(k: str):
    directory = disk_cache.cache_dir()
    return None if directory is None else directory / f"{_PACK_KIND}-{k}.marshal"


def get_pack(k: str):
    """The RulePack stored under `k`, or None (no cache, no entry, a corrupt or foreign one)."""
    path = _pack_path(k)
    if path is None:
        return None
    value = disk_cache.load_marshal(path, _pack_format(k))
    if value is None:
        return None
    try:
        pack = _decoded(value)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return None
    return pack if isinstance(pack, model.RulePack) else None


def put_pack(k: str, pack) -> None:
    """Store the pack (marshal of plain values: no code, no pickle); silently skipped when it cannot be written."""
    path = _pack_path(k)
    if path is None:
        return
    try:
        value = _encoded(pack)
    except KeyError:  # a rule object the cache does not know
        return
    if disk_cache.dump_marshal(path, _pack_format(k), value):  # (a value marshal cannot hold: not written)
        disk_cache.prune(path.parent, _PACK_KIND, ".marshal")


def _pack_format(k: str) -> str:
    """An entry's format names its key too: a file renamed to another key is a miss."""
    return f"{PACK_FORMAT} {k}"


# the fields that hold rule objects, and how: one, a tuple of them, a dict of them, a (condition, reason) pair or
# None; every other field is a plain value (text, numbers, tuples and dicts of them) and is stored as it is
_NESTED = {model.Condition: {"items": "many"}, model.Variant: {},
           model.Rule: {"when": "one", "verify_check": "many", "not_applicable": "pair", "variants": "many"},
           model.RulePack: {"rules": "dict"}}
_BY_NAME = {cls.__name__: cls for cls in _NESTED}
_FIELDS = {cls: tuple(f.name for f in dataclasses.fields(cls)) for cls in _NESTED}


def _encoded(obj) -> tuple:
    """A rule object as plain values marshal stores: (class name, its fields' values in order)."""
    nested = _NESTED[type(obj)]
    out = []
    for name in _FIELDS[type(obj)]:
        value, how = getattr(obj, name), nested.get(name)
        if how == "one":
            value = _encoded(value)
        elif how == "many":
            value = tuple(_encoded(v) for v in value)
        elif how == "dict":
            value = {k: _encoded(v) for k, v in value.items()}
        elif how == "pair":
            value = None if value is None else (_encoded(value[0]), value[1])
        out.append(value)
    return (type(obj).__name__, tuple(out))


def _decoded(entry):
    name, values = entry
    cls = _BY_NAME[name]
    names = _FIELDS[cls]
    if type(values) is not tuple or len(values) != len(names):
        raise ValueError("a foreign pack")
    nested = _NESTED[cls]
    if not nested:
        return cls(*values)
    args = list(values)
    for i, field_name in enumerate(names):
        how = nested.get(field_name)
        if how == "one":
            args[i] = _decoded(args[i])
        elif how == "many":
            args[i] = tuple(_decoded(v) for v in args[i])
        elif how == "dict":
            args[i] = {k: _decoded(v) for k, v in args[i].items()}
        elif how == "pair" and args[i] is not None:
            args[i] = (_decoded(args[i][0]), args[i][1])
    return cls(*args)
