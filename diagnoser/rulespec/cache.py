"""The compiled-pack cache: validated rule files, keyed by their bytes, so start-up skips the YAML
parse and the schema checks (~0.2-0.8 s) for rule files seen before.

An entry is JSON (never a pickle: nothing in the cache can run code), one file per key in the
user cache directory (`$DIAGNOSER_CACHE_DIR`, else `$XDG_CACHE_HOME/diagnoser`, else
`~/.cache/diagnoser`). The key hashes the rule file's text, the fact names it was checked against,
and the loader's own source, so an edited rule file, catalogue or loader never reads a stale
entry. Every failure (read-only home, full disk, a corrupt or foreign entry) falls back to parsing
the file; `DIAGNOSER_NO_CACHE=1` turns the cache off.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from .._version import __version__

FORMAT = "diagnoser.rule-cache/1"
MAX_ENTRIES = 256  # oldest entries beyond this are removed when one is written
_LOADER_SOURCES = ("loader.py", "schema.py", "model.py", "expr.py", "cache.py")
_loader_digest: str | None = None


def cache_dir() -> Path | None:
    if os.environ.get("DIAGNOSER_NO_CACHE"):
        return None
    explicit = os.environ.get("DIAGNOSER_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "diagnoser"


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
    d = cache_dir()
    if d is None:
        return None
    try:
        entry = json.loads((d / f"rules-{k}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or entry.get("format") != FORMAT or entry.get("key") != k:
        return None
    return entry.get("value") if isinstance(entry.get("value"), dict) else None


def put(k: str, value: dict) -> None:
    """Store atomically (temp file + rename); silently skip when the cache cannot be written."""
    d = cache_dir()
    if d is None:
        return
    try:
        text = json.dumps({"format": FORMAT, "key": k, "value": value}, ensure_ascii=False)
    except (TypeError, ValueError):
        return  # YAML values JSON cannot hold (dates...): not cached, parsed each time
    tmp = None
    try:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".rules-", suffix=".tmp", dir=str(d))
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, d / f"rules-{k}.json")
        tmp = None
        _prune(d)
    except OSError:
        pass
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _prune(d: Path) -> None:
    entries = list(d.glob("rules-*.json"))
    if len(entries) <= MAX_ENTRIES:
        return
    entries.sort(key=lambda p: p.stat().st_mtime)
    for p in entries[: len(entries) - MAX_ENTRIES]:
        try:
            p.unlink()
        except OSError:
            pass
