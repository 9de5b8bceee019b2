"""The input families, in one typed list: the pipeline, the workers (diagnoser.distributed) and the
catalogue read it. Adding a family: its package (readers, measure, analysis, catalogue), a module
here declaring its Family, and one line in FAMILIES."""
from __future__ import annotations

from ..input_family import Family, Reader
from .ncu import FAMILY as KERNEL
from .memory import FAMILY as MEMORY
from .timeline import FAMILY as TIMELINE

FAMILIES: tuple[Family, ...] = (TIMELINE, KERNEL, MEMORY)
_BY_KIND: dict[str, tuple[Family, Reader]] = {r.kind: (f, r) for f in FAMILIES for r in f.readers}


def family_of(kind: str) -> Family:
    """The family that reads inputs of `kind` (as diagnoser.ingest.sniff names it)."""
    return _BY_KIND[kind][0]


def reader_of(kind: str) -> Reader:
    return _BY_KIND[kind][1]


def known_kind(kind) -> bool:
    return kind in _BY_KIND


def read_input(path, kind: str, progress: bool = False):
    """Read one input of `kind` with its family's reader (one line naming the file on any failure)."""
    from .reading import read_with
    return read_with(reader_of(kind), path, progress)
