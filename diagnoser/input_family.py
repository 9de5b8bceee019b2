"""What an input family declares: its readers, `measure` (one input -> a picklable summary: what the
process pool and Dask workers run), `analyse` (the summaries of one group -> facts), its facts
catalogue and its settings, and how its inputs take part in runs. diagnoser.families lists the
families; the pipeline, the workers (diagnoser.distributed) and the catalogue read that list."""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable

from .facts import AnalysisResult, FactSpec


class RunRole(enum.Enum):
    """How a family's results take part in a run (diagnoser.runs.grouping, diagnoser.runs.merge)."""

    TIMELINE = "timeline"        # a run's backbone: timelines of two tools join when their kernels match; the
                                 # primary timeline's run-level facts are the run's
    KERNEL_PROFILE = "kernels"   # joins the timeline whose kernels it profiled; its shares restated in step time
    MEMORY = "memory"            # joins a timeline's run on evidence of time or program (runs.grouping.memory_evidence)


@dataclass(frozen=True)
class Reader:
    """One input kind (as diagnoser.ingest.sniff names it) and the reader that loads it."""

    kind: str
    read: Callable[..., object]  # (path, progress=False) -> the reader's model


@dataclass(frozen=True)
class Family:
    """One input family (timeline, kernel, memory)."""

    name: str
    readers: tuple[Reader, ...]
    # (source, local path, kind, progress) -> the input's summary: read, checked, measured, its tables dropped
    measure: Callable[[str, str, str, bool], object]
    analyse: Callable[[list], AnalysisResult]   # the summaries of one group (one input, or a run's ranks) -> facts
    catalogue: tuple[FactSpec, ...]             # every fact `analyse` can produce
    settings: Callable[[], tuple]               # the family's modules that declare settings (catalogue.all_settings)
    role: RunRole
    # one input per rank of a distributed run: measured by the workers (a rank that fails is named and the
    # others go on), the ranks of one run analysed together
    per_rank: bool = False
    # modules a worker process imports before its first task (multiprocessing's forkserver preload takes names)
    worker_preload: tuple[str, ...] = ()

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(r.kind for r in self.readers)
