"""The compiled-pack cache: validated rule files, keyed by their bytes, so start-up skips the YAML
parse and the schema checks (~0.2-0.8 s) for rule files seen before.

Entries live in the user cache directory (diagnoser/disk_cache.py: JSON, never a pickle; every failure
falls back to parsing the file; `DIAGNOSER_NO_CACHE=1` turns it off). The key hashes the rule file's
text, the fact names it was checked against, and the loader's own source, so an edited rule file,
catalogue or loader never reads a stale entry.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from .. import disk_cache
from .._version import __version__

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
