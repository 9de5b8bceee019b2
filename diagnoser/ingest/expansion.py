"""What the user typed -> the input files: a directory (`diagnose traces/`) means the trace files in
it, a glob (`'traces/*.json.gz'`) the files it matches, an fsspec URL (`s3://bucket/run/`,
`s3://bucket/run/*.json.gz`) is listed with fsspec (only names travel: the workers read the files
where they are)."""
from __future__ import annotations

import glob
import os
import re

from ..errors import InputError

# file names a directory listing keeps: profiler outputs (content still decides the kind)
TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite", ".sqlite.gz", ".nsys-rep", ".ncu-rep", ".pickle", ".pickle.gz",
                  ".gz")
GLOB_CHARS = re.compile(r"[*?\[]")
URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.\-]*://")


def is_url(path: str) -> bool:
    """An fsspec URL other than a plain local file (`file://` is just a path)."""
    return bool(URL.match(str(path))) and not str(path).startswith("file://")


def _trace_like(name: str) -> bool:
    return not name.startswith(".") and name.lower().endswith(TRACE_SUFFIXES)


REPORT_SUFFIXES = (".nsys-rep", ".qdrep", ".nsys-rep.gz", ".qdrep.gz")
EXPORT_SUFFIXES = (".sqlite", ".sqlite.gz")


def export_beside(path: str, names=None) -> str | None:
    """The SQLite export of the Nsight Systems report `path` when it lies beside it (X.sqlite or
    X.sqlite.gz for X.nsys-rep; `names`: the folder's listing, else the disk is asked); else None."""
    folder, name = os.path.split(str(path))
    stem = next((name[:-len(s)] for s in REPORT_SUFFIXES if name.endswith(s)), None)
    if stem is None:
        return None
    for suffix in EXPORT_SUFFIXES:
        candidate = os.path.join(folder, stem + suffix)
        if (names is not None and candidate in names) or (names is None and os.path.isfile(candidate)):
            return candidate
    return None


def _without_exported_reports(files: list[str]) -> list[str]:
    """A folder with X.nsys-rep beside its export X.sqlite(.gz) (the usual layout) is one run: the
    export is read, the report (which only `nsys` can read) is left out."""
    listed = set(files)
    return [f for f in files if export_beside(f, listed) is None]


def _in_directory(path: str) -> list[str]:
    names = sorted(n for n in os.listdir(path) if _trace_like(n) and os.path.isfile(os.path.join(path, n)))
    if not names:
        raise InputError(path, f"the directory holds no trace files (looked for {', '.join(TRACE_SUFFIXES[:5])}, ...)")
    return _without_exported_reports([os.path.join(path, n) for n in names])


def _remote(url: str) -> list[str]:
    try:
        import fsspec
    except ImportError:
        raise InputError(url, "reading a URL needs fsspec: pip install \"diagnoser[dask]\"") from None
    try:
        fs, _, [root] = fsspec.get_fs_token_paths(url)
        protocol = url.split("://", 1)[0]
        if GLOB_CHARS.search(url):
            found = sorted(fs.glob(root))
        elif fs.isdir(root):
            found = sorted(p for p in fs.ls(root, detail=False) if _trace_like(os.path.basename(p)))
        else:
            return [url]
    except InputError:
        raise
    except Exception as e:  # noqa: BLE001 - any backend's listing error, on one line
        raise InputError(url, f"cannot list ({type(e).__name__}: {e})") from None
    if not found:
        raise InputError(url, "matches no trace file")
    return [p if URL.match(p) else f"{protocol}://{p}" for p in found]


def expand_inputs(paths) -> list[str]:
    """Input files from files, directories, globs and URLs, in the order given (each expansion sorted)."""
    out: list[str] = []
    for raw in paths:
        p = str(raw)
        if is_url(p):
            out += _remote(p)
        elif os.path.isdir(p):
            out += _in_directory(p)
        elif not os.path.exists(p) and GLOB_CHARS.search(p):
            found = sorted(f for f in glob.glob(p) if os.path.isfile(f))
            if not found:
                raise InputError(p, "the pattern matches no file")
            out += _without_exported_reports(found)
        else:
            out.append(p)
    return list(dict.fromkeys(out))  # a file named twice (`dir/ dir/x`) is read once
