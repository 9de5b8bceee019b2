"""diagnoser as a library (`import diagnoser`): `diagnose(paths)` and `compare(before, after)` return
report objects a notebook shows (`_repr_html_`) and turns into tables (`to_frame`), JSON, Markdown,
HTML or JUnit. The `diagnose` command is a thin layer over the same calls; the errors are the
command's errors (DiagnoserError and its subclasses, the one line the command prints)."""
from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal, Union

from .errors import DiagnoserError
from .report import DEFAULT_TOP
from .text_safety import NOT_SHOWN
from .diagnosis import Report

if TYPE_CHECKING:  # (only for the annotations: the command line imports this module at start-up)
    import pandas as pd

    from .rulespec.model import Rule, RulePack

PathLike = Union[str, "os.PathLike[str]"]
Paths = Union[PathLike, Iterable[PathLike]]
# rule thresholds: {"TRAIN001.max_gpu_busy_pct": 60} or ["TRAIN001.max_gpu_busy_pct=60"] (as --param)
Params = Union[Mapping[str, Any], Iterable[str], None]
# analysis settings: {"findings.warning_min_gain_pct": 2} or ["findings.warning_min_gain_pct=2"] (as --set)
Settings = Union[Mapping[str, Any], Iterable[str], None]
Format = Literal["md", "json", "html", "terminal", "junit"]
IFRAME_HEIGHT_PX = 720  # a report shown in a notebook cell: its own page in a frame, scrolled inside


def _paths(paths: Paths) -> list[str]:
    if isinstance(paths, (str, os.PathLike)):
        return [os.fspath(paths)]
    out = [os.fspath(p) for p in paths]
    if not out:
        raise DiagnoserError("no input files given")
    return out


def _assignments(values: Params | Settings) -> list[str]:
    """A mapping or NAME=VALUE strings as NAME=VALUE strings: parsed and checked exactly as the
    command line's --param / --set are (same errors)."""
    if values is None:
        return []
    if isinstance(values, str):
        return [values]
    if isinstance(values, Mapping):
        return [f"{k}={'true' if v is True else 'false' if v is False else v}" for k, v in values.items()]
    return [str(v) for v in values]


def _frame(rows: list[dict], columns: list[str]) -> "pd.DataFrame":
    import pandas as pd
    return _absent_text_as_none(pd.DataFrame(rows, columns=columns))


def _absent_text_as_none(frame: "pd.DataFrame") -> "pd.DataFrame":
    """One convention in every table: an absent value is NaN in a number column and None in any other
    (pandas would make it NaN in a text column read from dicts with the key missing)."""
    import pandas as pd
    for col in frame.columns:
        if not pd.api.types.is_numeric_dtype(frame[col]):
            frame[col] = pd.Series([None if isinstance(v, float) and v != v else v for v in frame[col]],
                                   index=frame.index, dtype=object)
    return frame


def _iframe(page: str) -> str:
    import html  # (its entity table: only a notebook shows a report inline)
    return (f'<iframe srcdoc="{html.escape(page, quote=True)}" style="width:100%;height:{IFRAME_HEIGHT_PX}px;'
            'border:1px solid #ccc;resize:vertical" sandbox="allow-scripts"></iframe>')


FINDING_COLUMNS = ["rule", "name", "title", "category", "tree", "severity", "rule_severity", "estimated_gain",
                   "marginal_gain", "gain_of", "subject_kind", "subject_id", "subject_name", "count", "run",
                   "message", "evidence", "fix", "verify", "sources"]
FACT_COLUMNS = ["name", "value", "unit", "subject_kind", "subject_id", "subject_name", "source"]


@dataclass(repr=False)
class DiagnosisReport(Report):
    """The diagnosis of some inputs (pipeline.Report: ranked findings, the measured facts, notes, inputs,
    settings...) with the rules in force, as a library returns it: tables, formats, the runs the inputs
    are (one entry per separate run, each with its inputs)."""

    # the rules in force, by id: no text format shows them from here (JUnit takes them, and escapes, apart)
    rules: list["Rule"] = field(default_factory=list, metadata=NOT_SHOWN)

    @property
    def runs(self) -> list[dict]:
        """`[{"run": 1, "inputs": [...]}]`: one entry per separate run among the inputs, each with its inputs."""
        runs = self.separate_runs or [{"run": 1, "inputs": [i["path"] for i in self.inputs]}]
        return [{"run": r["run"], "inputs": list(r["inputs"])} for r in runs]

    @property
    def report(self) -> "DiagnosisReport":
        """The report the renderers take: this one (one report type)."""
        return self

    def __repr__(self) -> str:
        counts = {s: sum(1 for f in self.findings if f.severity == s) for s in ("critical", "warning", "info")}
        first = f"; first: {self.findings[0].rule} {self.findings[0].title}" if self.findings else ""
        inputs = ", ".join(i["path"] for i in self.inputs)
        return (f"<DiagnosisReport of {inputs}: {counts['critical']} critical, {counts['warning']} warning, "
                f"{counts['info']} info{first}; {len(self.facts)} facts, {len(self.runs)} run(s)>")

    def failed(self, fail_on: Literal["warning", "critical"]) -> bool:
        """Whether a finding is at or above `fail_on` (the `--fail-on` gate)."""
        from .report.junit import at_or_above
        return any(at_or_above(f.severity, fail_on) for f in self.findings)

    @property
    def findings_table(self) -> "pd.DataFrame":
        """The findings as a pandas DataFrame, one row per finding in rank order (`to_frame("findings")`)."""
        return self.to_frame("findings")

    @property
    def facts_table(self) -> "pd.DataFrame":
        """The facts as a pandas DataFrame, one row per fact and subject (`to_frame("facts")`)."""
        return self.to_frame("facts")

    def to_frame(self, of: Literal["findings", "facts"] = "findings") -> "pd.DataFrame":
        """The findings (one row per finding, in rank order) or the facts (one row per fact) as a
        pandas DataFrame (also `findings_table` / `facts_table`). A value absent from a row is None
        in a text column and NaN in a number column, as in ComparisonReport's tables."""
        if of == "findings":
            return _frame([{
                "rule": f.rule, "name": f.name, "title": f.title, "category": f.category, "tree": f.tree,
                "severity": f.severity, "rule_severity": f.rule_severity or f.severity,
                "estimated_gain": f.estimated_gain, "marginal_gain": f.marginal_gain, "gain_of": f.gain_of,
                "subject_kind": f.subject.kind if f.subject else None, "subject_id": f.subject.id if f.subject else None,
                "subject_name": f.subject.name if f.subject else None, "count": f.count, "run": f.run or 1,
                "message": f.message, "evidence": {k: v.get("value") for k, v in f.evidence.items()},
                "fix": f.fix, "verify": f.verify, "sources": list(f.sources)} for f in self.findings], FINDING_COLUMNS)
        if of == "facts":
            return _frame([{
                "name": x.name, "value": x.value, "unit": x.unit,
                "subject_kind": x.subject.kind if x.subject else None, "subject_id": x.subject.id if x.subject else None,
                "subject_name": x.subject.name if x.subject else None, "source": x.source} for x in self.facts], FACT_COLUMNS)
        raise DiagnoserError(f"to_frame({of!r}): choose 'findings' or 'facts'")

    def render(self, fmt: Format, top: int | None = None, min_severity: str = "info",
               fail_on: str | None = None) -> str:
        """The report as the command writes it in `fmt` (`top` None: the command's default)."""
        if fmt == "junit":
            from .report.junit import render_junit
            return render_junit(self.report, self.rules, fail_on)
        from .report.render import render_report
        if top is None and fmt in ("md", "terminal"):
            top = DEFAULT_TOP
        return render_report(self.report, fmt, top=top, min_severity=min_severity)

    def to_json(self, top: int | None = None, min_severity: str = "info") -> str:
        """The `diagnoser.report/1` JSON document (every finding unless `top` / `min_severity`)."""
        return self.render("json", top, min_severity)

    def to_markdown(self, top: int | None = None, min_severity: str = "info") -> str:
        return self.render("md", top, min_severity)

    def to_html(self, top: int | None = None, min_severity: str = "info") -> str:
        """The self-contained HTML page (`diagnose FILE -o report.html`)."""
        return self.render("html", top, min_severity)

    def to_junit(self, fail_on: Literal["warning", "critical"] | None = None) -> str:
        """JUnit XML: a test case per rule in force and run, failed for findings at or above `fail_on`
        (default: warning)."""
        return self.render("junit", fail_on=fail_on)

    def _repr_html_(self) -> str:
        return _iframe(self.to_html())


def load_rules(rules: Paths | None = None, params: Params = None) -> "RulePack":
    """The shipped rules plus the rule files or folders in `rules`, with `params` applied."""
    from .pipeline import load_pack
    return load_pack(_paths(rules) if rules else [], _assignments(params))


def diagnose(paths: Paths, rules: Paths | None = None, params: Params = None, settings: Settings = None, *,
             progress: bool = False, jobs: int = 0, scheduler: str | None = None) -> DiagnosisReport:
    """Diagnose `paths` (files, folders or globs, as `diagnose FILE...` takes them) with the shipped
    rules plus `rules`; `params` and `settings` as `--param` and `--set`. `jobs` / `scheduler`: where
    rank traces are measured (as `--jobs` / `--scheduler`)."""
    from . import settings as settings_mod
    from .catalogue import all_settings
    from .distributed import executing
    from .pipeline import diagnose as run_pipeline
    files = _paths(paths)
    pack = load_rules(rules, params)
    set_values = settings_mod.parse_assignments(_assignments(settings), all_settings()) if settings else {}
    with executing(jobs, scheduler):
        report = run_pipeline(files, pack=pack, progress=progress, set_values=set_values)
    return DiagnosisReport(**{f.name: getattr(report, f.name) for f in fields(Report)}, rules=pack.ordered())


COMPARED_FINDING_COLUMNS = ["verdict", "rule", "category", "title", "severity_before", "severity_after"]
COMPARED_FACT_COLUMNS = ["name", "subject", "before", "after", "unit", "change_pct", "moved"]


@dataclass
class ComparisonReport:
    """Two runs compared (`diagnose compare`): each finding of BEFORE fixed, improved, unchanged or
    regressed, the findings new in AFTER, the headline numbers and every fact both measured.
    `data` is the `diagnoser.compare/1` document (docs/compare.md) with the charts' data."""

    findings: list[dict]
    facts: list[dict]
    headlines: list[dict]
    notes: list[str]
    runs: dict  # {"before": {...inputs, findings, noise_pct, steps}, "after": {...}}
    summary: dict
    data: dict = field(repr=False)

    def __repr__(self) -> str:
        counts = ", ".join(f"{n} {v}" for v, n in self.summary.items())
        return (f"<ComparisonReport of {', '.join(i['path'] for i in self.runs['before']['inputs'])} -> "
                f"{', '.join(i['path'] for i in self.runs['after']['inputs'])}: {counts}>")

    def gate(self, fail_on_regression: float) -> list[str]:
        """Why `--fail-on-regression PCT` trips (empty: it does not)."""
        from .comparison.gate import gate
        return list(gate(self.data, fail_on_regression))

    def to_frame(self, of: Literal["findings", "facts", "headlines"] = "findings") -> "pd.DataFrame":
        """Findings with their verdicts, the facts both runs measured, or the headline numbers."""
        import pandas as pd
        rows = {"findings": self.findings, "facts": self.facts, "headlines": self.headlines}.get(of)
        if rows is None:
            raise DiagnoserError(f"to_frame({of!r}): choose 'findings', 'facts' or 'headlines'")
        frame = pd.DataFrame(rows)
        first = {"findings": COMPARED_FINDING_COLUMNS, "facts": COMPARED_FACT_COLUMNS}.get(of, [])
        ordered = [c for c in first if c in frame.columns] + [c for c in frame.columns if c not in first]
        frame = frame[ordered] if len(frame.columns) else frame
        return _absent_text_as_none(frame)

    @property
    def findings_table(self) -> "pd.DataFrame":
        """The findings with their verdicts as a DataFrame (`to_frame("findings")`)."""
        return self.to_frame("findings")

    @property
    def facts_table(self) -> "pd.DataFrame":
        """Every fact both runs measured as a DataFrame (`to_frame("facts")`)."""
        return self.to_frame("facts")

    @property
    def headlines_table(self) -> "pd.DataFrame":
        """The headline numbers before and after as a DataFrame (`to_frame("headlines")`)."""
        return self.to_frame("headlines")

    def render(self, fmt: Literal["md", "json", "html", "terminal"], fail_on_regression: float | None = None) -> str:
        if fail_on_regression is not None:
            fail_on_regression = float(fail_on_regression)  # as the command's --fail-on-regression gives it
        reasons = self.gate(fail_on_regression) if fail_on_regression is not None else None
        if fmt == "json":
            from .comparison.render import render_json
            return render_json(self.data, fail_on_regression, reasons)
        if fmt == "html":
            from .comparison.html import render_html
            return render_html(self.data, fail_on_regression, reasons)
        if fmt == "terminal":
            from .comparison.terminal import render_terminal
            return render_terminal(self.data, fail_on_regression, reasons)
        from .comparison.render import render_markdown
        return render_markdown(self.data, fail_on_regression, reasons)

    def to_json(self, fail_on_regression: float | None = None) -> str:
        """The `diagnoser.compare/1` JSON document (with `gate` when `fail_on_regression` is given)."""
        return self.render("json", fail_on_regression)

    def to_markdown(self, fail_on_regression: float | None = None) -> str:
        return self.render("md", fail_on_regression)

    def to_html(self, fail_on_regression: float | None = None) -> str:
        return self.render("html", fail_on_regression)

    def _repr_html_(self) -> str:
        return _iframe(self.to_html())


def compare(before: Paths, after: Paths, rules: Paths | None = None, params: Params = None,
            settings: Settings = None, *, kernels: Iterable[str] | None = None,
            to_kernels: Iterable[str] | None = None, progress: bool = False) -> ComparisonReport:
    """Diagnose BEFORE and AFTER with the same rules and compare them (`diagnose compare BEFORE --to
    AFTER`); `kernels` / `to_kernels`: only these Nsight Compute launch ids of each side."""
    from . import settings as settings_mod
    from .catalogue import all_settings
    from .comparison.core import compare_runs
    pack = load_rules(rules, params)
    set_values = settings_mod.parse_assignments(_assignments(settings), all_settings()) if settings else {}
    data = compare_runs(_paths(before), _paths(after), pack, progress=progress, set_values=set_values,
                        kernels=[str(k) for k in kernels] if kernels else None,
                        to_kernels=[str(k) for k in to_kernels] if to_kernels else None)
    if not data["before"]["inputs"] or not data["after"]["inputs"]:
        raise DiagnoserError("compare: a side has no readable input")
    return ComparisonReport(data["findings"], data["facts"], data["headlines"], data["notes"],
                            {"before": data["before"], "after": data["after"]}, data["summary"], data)
