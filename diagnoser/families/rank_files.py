"""The ranks of a many-rank run: which rank each file is (its `distributedInfo`, else its file name:
`...rank12...`, with the world size the highest such rank + 1), which ranks failed or are missing,
and which traces of one world size are separate runs."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError

RANK_IN_NAME = re.compile(r"(?:^|[^a-z])rank[_\-.]?(\d+)(?!\d)", re.IGNORECASE)


def rank_from_name(path: str) -> int | None:
    """The rank a file name states (`ddp.rank3.pt.trace.json.gz`, `trace_rank_12.json`), else None."""
    name = os.path.basename(str(path).rstrip("/"))
    found = RANK_IN_NAME.findall(name)
    return int(found[-1]) if found else None


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
