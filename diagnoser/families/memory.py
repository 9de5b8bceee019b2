"""The memory family: CUDA memory snapshots and allocator counters (memory_stats JSON, memory_summary
text), read in the calling process, one input per group; OOM, leak and composition facts
(diagnoser.memory.analysis)."""
from __future__ import annotations

from ..input_family import Family, Reader, RunRole
from ..memory.catalogue import CATALOGUE
from . import reading


def _snapshot(path, progress: bool = False):
    from ..ingest.mem_snapshot import read_snapshot
    return read_snapshot(path, progress=progress)


def _stats(path, progress: bool = False):
    from ..ingest.mem_stats import read_memory_stats
    return read_memory_stats(path, progress=progress)


def _summary(path, progress: bool = False):
    from ..ingest.mem_stats import read_memory_summary
    return read_memory_summary(path, progress=progress)


READERS = (Reader("mem-snapshot", _snapshot), Reader("mem-stats", _stats), Reader("mem-summary", _summary))
_BY_KIND = {r.kind: r for r in READERS}


def measure(source: str, local: str, kind: str, progress: bool = False):
    """The snapshot or counters as the reader returns them (their summary is the model itself)."""
    return reading.read_with(_BY_KIND[kind], local, progress)


def analyse(models: list):
    from ..memory.analysis import memory_analysis
    return memory_analysis(models)


def settings() -> tuple:
    from ..memory import kv_cache, lifetimes
    return kv_cache, lifetimes


FAMILY = Family("memory", READERS, measure, analyse, tuple(CATALOGUE), settings, RunRole.MEMORY)
