"""The ranks of a many-rank run: which files they are, which rank each file is, and which are missing.

`expand_inputs` turns what the user typed into input files: a directory (`diagnose traces/`) means
the trace files in it, a glob (`'traces/*.json.gz'`) the files it matches, an fsspec URL
(`s3://bucket/run/`, `s3://bucket/run/*.json.gz`) is listed with fsspec (only names travel: the
workers read the files where they are). A trace's rank comes from its `distributedInfo`; when a
trace has none, from its file name (`...rank12...`), with the world size the highest such rank + 1.
"""
from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import InputError

# file names a directory listing keeps: profiler outputs (content still decides the kind)
TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite", ".sqlite.gz", ".nsys-rep", ".ncu-rep", ".pickle", ".pickle.gz",
                  ".gz")
GLOB_CHARS = re.compile(r"[*?\[]")
URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.\-]*://")
RANK_IN_NAME = re.compile(r"(?:^|[^a-z])rank[_\-.]?(\d+)(?!\d)", re.IGNORECASE)


def is_url(path: str) -> bool:
    """An fsspec URL other than a plain local file (`file://` is just a path)."""
    return bool(URL.match(str(path))) and not str(path).startswith("file://")


def rank_from_name(path: str) -> int | None:
    """The rank a file name states (`ddp.rank3.pt.trace.json.gz`, `trace_rank_12.json`), else None."""
    name = os.path.basename(str(path).rstrip("/"))
    found = RANK_IN_NAME.findall(name)
    return int(found[-1]) if found else None


def _trace_like(name: str) -> bool:
    return not name.startswith(".") and name.lower().endswith(TRACE_SUFFIXES)


def _in_directory(path: str) -> list[str]:
    names = sorted(n for n in os.listdir(path) if _trace_like(n) and os.path.isfile(os.path.join(path, n)))
    if not names:
        raise InputError(path, f"the directory holds no trace files (looked for {', '.join(TRACE_SUFFIXES[:5])}, ...)")
    return [os.path.join(path, n) for n in names]


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
            out += found
        else:
            out.append(p)
    return list(dict.fromkeys(out))  # a file named twice (`dir/ dir/x`) is read once


@dataclass
class RankFailure:
    """A rank's trace that could not be read or analysed: named in the report, the others go on."""

    path: str
    problem: str
    rank: int | None  # from its file name, when it states one

    def note(self, others: int) -> str:
        who = f"rank {self.rank} ({self.path})" if self.rank is not None else self.path
        return f"{who} could not be diagnosed: {self.problem}; the diagnosis covers the other {others} rank trace(s)"


def ranks_from_names(measured: list) -> list[str]:
    """Give traces without distributedInfo their rank from the file name (when 2+ names state one);
    the world size is then the highest known rank + 1. Sets rank on the MeasuredTimeline and its
    RankSummary. Returns notes saying so."""
    unranked = [m for m in measured if m.rank is None and rank_from_name(m.path) is not None]
    if len(unranked) < 2:
        return []
    for m in unranked:
        m.rank = rank_from_name(m.path)
        if m.metrics.rank is not None:
            m.metrics.rank.rank = m.rank
    world = max(max(m.rank for m in unranked) + 1, max((m.world_size or 0) for m in measured))
    for m in unranked:
        m.world_size = world
    shown = ", ".join(Path(m.path).name for m in unranked[:3]) + (", ..." if len(unranked) > 3 else "")
    return [f"{len(unranked)} traces carry no distributedInfo: their ranks are taken from their file names "
            f"({shown}), the world size ({world}) from the highest rank"]


def attach_failures(failures: list[RankFailure], notes: list[str], ranked: dict) -> None:
    """Name the failed rank traces on the largest distributed group; with no such group there is no
    diagnosis to save, and the first failure is the error (one line, exit 1)."""
    if not failures and not notes:
        return
    if not ranked:
        if failures:
            raise InputError(failures[0].path, failures[0].problem)
        return
    g = ranked[max(sorted(ranked), key=lambda world: len(ranked[world].models))]
    g.notes[:0] = notes + [f.note(len(g.models)) for f in failures]


def run_stem(path: str) -> str:
    """A file name with its rank (or, lacking one, every number) blanked: the ranks of one run share it
    (`ddp_straggler.rank0.pt.trace.json.gz` and `...rank1...` -> `ddp_straggler.rank*.pt.trace.json.gz`)."""
    name = os.path.basename(str(path).rstrip("/"))
    if RANK_IN_NAME.search(name):
        return RANK_IN_NAME.sub(lambda m: m.group(0)[:m.start(1) - m.start(0)] + "*", name)
    return re.sub(r"\d+", "*", name)


def run_labels(measured: dict) -> dict:
    """path -> the run it belongs to, among traces of the same world size: "" when their ranks are all
    distinct (one run), else the file-name stem (`diagnose traces/` over a folder of several runs)."""
    by_world: dict = {}
    for path, m in measured.items():
        if m.rank is not None and m.world_size:
            by_world.setdefault(m.world_size, []).append(path)
    labels = {}
    for paths in by_world.values():
        ranks = [measured[p].rank for p in paths]
        split = len(set(ranks)) < len(ranks)
        for p in paths:
            labels[p] = run_stem(p) if split else ""
    return labels
