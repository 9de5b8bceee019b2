"""Facts: the flat, typed measurements that rules reason about.

A Fact is one number, string or bool with its unit, the source that measured it (file + reader)
and an optional subject (the kernel, rank, step or stream it describes; None = the whole run).
Every fact a reader/analysis can emit is declared once as a FactSpec in a catalogue; the
catalogue is the vocabulary rule authors write conditions against (`diagnose facts --catalogue`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from .result_tables import ResultTables
from .shares import Share

Value = Union[float, int, str, bool]

SUBJECT_KINDS = ("run", "kernel", "rank", "step", "stream", "device", "site")


@dataclass(frozen=True, order=True)
class Subject:
    """What a fact or finding is about. kind: kernel | rank | step | stream | device | site."""

    kind: str
    id: str
    name: str | None = None

    def to_json(self) -> dict:
        return {"kind": self.kind, "id": self.id, "name": self.name}


@dataclass(frozen=True)
class Fact:
    """One measured value: a catalogue name, its value and unit, the input (and reader) that measured it, and
    the subject (kernel, op, rank...) it is about, None for the run."""

    name: str
    value: Value
    unit: str
    source: str  # "<file> (<reader>)"
    subject: Subject | None = None


@dataclass(frozen=True)
class FactSpec:
    """Catalogue entry: a fact name, its type, unit, meaning, and the subject kind it attaches to."""

    name: str
    type: str  # "number" | "string" | "bool"
    unit: str
    meaning: str
    subject: str = "run"  # one of SUBJECT_KINDS
    sources: tuple[str, ...] = ()  # input kinds that can produce it
    collect: str = ""  # how to collect the input that yields it (for "not evaluated" messages)
    share: Share | None = None  # a share of a unit a gain is stated in: which parts of it (gain_parts.py)

    def to_json(self) -> dict:
        """The entry as `diagnose facts --catalogue --format json` lists it (its share is the ledger's)."""
        return {k: v for k, v in self.__dict__.items() if k != "share"} | {"sources": list(self.sources)}


@dataclass
class AnalysisResult:
    """What one analysis produces: facts for the engine, chart-ready series for reports, typed tables for
    the layers above.

    `charts` holds plain data (lists/dicts of numbers and strings) already computed by analysis,
    so templates only draw; keys are documented where they are produced. Nothing reads them back as
    input: what run grouping and compare read is in `tables` (result_tables.py).
    """

    facts: list[Fact] = field(default_factory=list)
    charts: dict = field(default_factory=dict)
    tables: ResultTables = field(default_factory=ResultTables)
    inputs: list[dict] = field(default_factory=list)  # [{"path", "kind"}]
    notes: list[str] = field(default_factory=list)  # caveats worth showing the user
    # who measured what, when and where (time window on the Unix clock, Python files, device memory):
    # what diagnoser.runs reads to decide which inputs are one run; never facts for rules
    identity: dict = field(default_factory=dict)
    # subject -> {the unit a rule states its gain in (gain_of): the unit its share is of here}: an Nsight
    # Compute launch matched to its run's timeline has its GPU-time share restated in step time (runs.merge)
    gain_units: dict = field(default_factory=dict)
    # one steady step of the timeline whose numbers the run-level facts are, as timeline/replay.py replays it
    # (the step time after a fix); None for other families; never facts for rules
    step_graph: object = None
