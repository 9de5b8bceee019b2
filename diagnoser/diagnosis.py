"""The one report type: a diagnosis as pipeline.diagnose makes it, the renderers (report/) draw it, and
the library returns it with its formats and tables (diagnoser.api.DiagnosisReport, a subclass). It
imports only the typed result tables (no pandas), so `import diagnoser` stays fast."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .result_tables import ResultTables

if TYPE_CHECKING:
    from .facts import Fact
    from .findings import Finding, NotApplicable, NotEvaluated


@dataclass
class Report:
    """A diagnosis of some inputs: its findings in rank order, what was not evaluated and why, facts,
    notes, chart data, how it was made (settings), per run what was evaluated and predicted."""

    inputs: list[dict]
    findings: list[Finding]
    not_evaluated: list[NotEvaluated]
    charts: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)
    settings: dict = field(default_factory=dict)  # how it was made: --param, rule packs, --set (RulePack.provenance)
    # several separate runs among the inputs: [{run, inputs, charts, facts}], each run's own chart data
    # and run-level facts (then `charts` above keeps, per key, the first run's that has it); [] for one run
    separate_runs: list[dict] = field(default_factory=list)
    # each user rule in force -> its rule file: the report finds the rule's playbook section beside it
    rule_files: dict[str, str] = field(default_factory=dict)
    # rules the inputs show have nothing to act on (no GEMMs, no OOM, no KV cache), with the reason
    not_applicable: list[NotApplicable] = field(default_factory=list)
    # each run's identity (AnalysisResult.identity: Unix-clock window, Python programs and files, device
    # memory), in run order: the evidence diagnoser.runs groups on, for `compare` to tell two programs apart
    identities: list[dict] = field(default_factory=list)
    # per run (in order), the ids of the rules evaluated on it: applicable to its inputs, facts present
    # (the JUnit report's test cases); a rule left out does not apply there, or is not_evaluated / not_applicable
    evaluated: list[list[str]] = field(default_factory=list)
    # per run (in order): the step time after all its step-time findings' fixes together,
    # {step_ms, low, high, rules} (predict_steps), or None where it has none
    predictions: list = field(default_factory=list)
    # per run (in order): the peak after its memory findings' fixes together, {peak_gib, low, high, rules}
    # (predict_peak_all), or None
    peak_predictions: list = field(default_factory=list)
    # the typed tables compare reads (steps, kernels, ops, the host's time between ops): per table, the first
    # run's that has it, as `charts`
    tables: ResultTables = field(default_factory=ResultTables)

    @property
    def predicted_peak_all(self) -> dict | None:
        """The first run's peak after all its memory fixes together (None: fewer than two to add)."""
        return next((p for p in self.peak_predictions if p), None)

    @property
    def predicted_step_ms_all(self) -> dict | None:
        """The first run's prediction for all its fixes together (None: no step-time finding)."""
        return next((p for p in self.predictions if p), None)
