"""The user cache directory and its JSON entries: what start-up would otherwise recompute from files
that did not change (the checked rule files: rulespec/cache.py; the shared rule conditions settings
take their defaults from: settings.py; compiled templates: report/template_env.py; the compiled methods of
dataclasses: dataclass_code.py, code like the templates', and the compiled regular expressions: regex_code.py,
both for the command's own process only; the built shipped rule pack: rulespec/cache.py, marshal of plain
values).

An entry is JSON (never a pickle: nothing in the cache can run code), one file per key in the user
cache directory (`$DIAGNOSER_CACHE_DIR`, else `$XDG_CACHE_HOME/diagnoser`, else `~/.cache/diagnoser`),
named `KIND-KEY.json`. The caller's key hashes everything the value depends on, so a changed input
never reads a stale entry. Every failure (read-only home, full disk, a corrupt or foreign entry) is a
miss: the caller computes the value; `DIAGNOSER_NO_CACHE=1` turns the cache off.
"""
from __future__ import annotations

import json
import marshal
import os
import tempfile
from pathlib import Path

MAX_ENTRIES = 256  # per kind: the oldest entries beyond this are removed when one is written


def cache_dir() -> Path | None:
    if os.environ.get("DIAGNOSER_NO_CACHE"):
        return None
    explicit = os.environ.get("DIAGNOSER_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "diagnoser"


def get(kind: str, fmt: str, k: str) -> dict | None:
    """The value stored under `k` in `fmt`, or None (no cache, no entry, an unreadable or foreign one)."""
    d = cache_dir()
    if d is None:
        return None
    try:
        entry = json.loads((d / f"{kind}-{k}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or entry.get("format") != fmt or entry.get("key") != k:
        return None
    return entry.get("value") if isinstance(entry.get("value"), dict) else None


def put(kind: str, fmt: str, k: str, value: dict) -> None:
    """Store atomically (temp file + rename); silently skip when the cache cannot be written."""
    d = cache_dir()
    if d is None:
        return
    try:
        text = json.dumps({"format": fmt, "key": k, "value": value}, ensure_ascii=False)
    except (TypeError, ValueError):
        return  # values JSON cannot hold (dates...): not cached, computed each time
    if write_atomic(d / f"{kind}-{k}.json", text.encode("utf-8")):
        _prune(d, kind)


def write_atomic(path: Path, data: bytes) -> bool:
    """Write data to path in the cache directory atomically (a temp file beside it, then a rename; the folder made
    private); False, and nothing left behind, when it cannot be written."""
    tmp = None
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}-", suffix=".tmp", dir=str(path.parent))
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        tmp = None
        return True
    except OSError:
        return False
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def load_marshal(path: Path, fmt: str):
    """The value of a marshal entry written by dump_marshal in `fmt`; None for a missing, unreadable, corrupt or
    foreign file (the caller checks the value's shape)."""
    try:
        entry = marshal.loads(path.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        return None
    if not isinstance(entry, dict) or entry.get("format") != fmt:
        return None
    return entry.get("value")


def dump_marshal(path: Path, fmt: str, value) -> bool:
    """Atomically (write_atomic); False, and nothing written, when the value cannot be marshalled or the cache
    written."""
    try:
        data = marshal.dumps({"format": fmt, "value": value})
    except ValueError:
        return False
    return write_atomic(path, data)


def _prune(d: Path, kind: str) -> None:
    prune(d, kind, ".json")


def prune(d: Path, kind: str, suffix: str) -> None:
    """Past MAX_ENTRIES entries of a kind (files `KIND-*SUFFIX`), the oldest are removed."""
    entries = list(d.glob(f"{kind}-*{suffix}"))
    if len(entries) <= MAX_ENTRIES:
        return
    entries.sort(key=lambda p: p.stat().st_mtime)
    for p in entries[: len(entries) - MAX_ENTRIES]:
        try:
            p.unlink()
        except OSError:
            pass
