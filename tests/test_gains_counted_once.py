"""One gain per unit of time: findings that explain the same time share it (diagnoser/gain_parts.py).

Over every corpus, external and fixture input (and two cross-source runs) the marginal gains on one
unit of one run never add up to more than the unit; on the DDP straggler pair the unexplained idle
of the straggler rank is counted once, for the straggler finding, and the report says so."""
from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

from diagnoser.errors import InputError
from diagnoser.facts import Subject
from diagnoser.findings import Finding, arrange
from diagnoser.catalogue import catalogue
from diagnoser.gain_parts import IDLE, PARTS_BY, unit_parts
from diagnoser.kernel_categories import KERNEL_CATEGORIES
from diagnoser.memory_owners import OWNERS
from diagnoser.pipeline import diagnose, load_pack
from diagnoser.report.render import render_html, render_json, render_markdown, render_report
from diagnoser.rulespec.expr import budget_names

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
STRAGGLER = sorted((SHARED / "corpus" / "torch").glob("ddp_straggler.rank*.pt.trace.json.gz"))
CROSS_SOURCE = [(ROOT / "fixtures/nsys/c_train_mlp.sqlite.gz", ROOT / "fixtures/ncu/c_train_mlp_top.raw.csv.gz"),
                (ROOT / "fixtures/nsys/m_train_wide_mlp_metric_syncs.sqlite.gz",
                 ROOT / "fixtures/torch/m_train_wide_mlp_metric_syncs.pt.trace.json.gz")]


def _inputs() -> list[tuple[str, ...]]:
    """Every input the readers take under ../shared/corpus, ../shared/external and fixtures/, the ranks of
    one run together, each content once (fixtures repeat corpus files)."""
    files = []
    for base in (SHARED / "corpus", SHARED / "external", ROOT / "fixtures"):
        for p in sorted(base.rglob("*")) if base.is_dir() else ():
            n = p.name
            if not p.is_file() or n.startswith("README") or re.search(r"\.(analyze|stats)[._]", n) \
                    or n.endswith((".md", ".txt.gz", ".analyze.txt")):
                continue
            if n.endswith(".txt") and not n.endswith(".memory_summary.txt"):
                continue
            files.append(p)
    groups: dict[str, list[Path]] = {}
    for p in files:
        groups.setdefault(re.sub(r"\.rank\d+\.", ".rankN.", str(p)), []).append(p)
    seen, out = set(), []
    for g in groups.values():
        digest = hashlib.sha1(b"".join(p.read_bytes() for p in g)).hexdigest()
        if digest not in seen:
            seen.add(digest)
            out.append(tuple(str(p) for p in g))
    return out + [tuple(str(p) for p in pair) for pair in CROSS_SOURCE if all(p.exists() for p in pair)]


INPUTS = _inputs()


def _label(group: tuple[str, ...]) -> str:
    return "+".join(Path(p).name for p in group)


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared (corpus and external traces) is not present")
@pytest.mark.parametrize("group", INPUTS, ids=[_label(g) for g in INPUTS])
def test_marginal_gains_on_one_unit_never_add_up_to_more_than_it(group):
    try:
        report = diagnose(list(group))
    except InputError as e:
        if "nsys" in str(e) and "can only be read through" in str(e):
            pytest.skip(f"{_label(group)}: needs NVIDIA's nsys to read")
        raise
    total: dict[tuple, float] = defaultdict(float)
    for f in report.findings:
        assert f.marginal_gain is not None and f.marginal_gain <= f.estimated_gain + 1e-9
        total[(f.run, f.gain_of)] += f.marginal_gain
        if f.overlaps:  # who explains the same time ranks above it, in the same unit and run
            above = {g.rule for g in report.findings[:report.findings.index(f)] if (g.run, g.gain_of) == (f.run, f.gain_of)}
            assert set(f.overlaps) <= above, (f.rule, f.overlaps)
            assert f.gain_together is not None and f.gain_together <= 1.0 + 1e-9
    for (run, unit), gain in total.items():
        assert gain <= 1.0 + 1e-6, f"{_label(group)}: run {run}, {unit}: marginal gains add up to {gain:.1%}"


@pytest.mark.skipif(len(STRAGGLER) != 2, reason="../shared/corpus/torch/ddp_straggler.rank*.pt.trace.json.gz is not present")
def test_straggler_pair_counts_the_straggler_s_unexplained_idle_once():
    """Rank 1 is the straggler (TRAIN005, 81% of the step: its own work) and the unexplained idle
    (TRAIN012, 68%) is its host's: 149% of the step before, now TRAIN012 adds only the part of its
    idle TRAIN005 leaves unclaimed."""
    report = diagnose([str(p) for p in STRAGGLER])
    by = {f.rule: f for f in report.findings}
    straggler, idle = by["TRAIN005"], by["TRAIN012"]
    assert report.findings.index(straggler) < report.findings.index(idle)
    assert straggler.marginal_gain == straggler.estimated_gain > 0.7
    assert idle.estimated_gain > 0.6 and idle.marginal_gain < 0.2 and idle.overlaps == ["TRAIN005"]
    assert straggler.marginal_gain + idle.marginal_gain <= 1.0
    assert abs(idle.gain_together - (straggler.marginal_gain + idle.marginal_gain)) < 1e-9
    md = render_markdown(report)
    assert "`TRAIN005` (finding 1) already claims part of this share of step time; beyond it: " in md
    assert f"with it: {round(100 * idle.gain_together)}% of step time together" in md
    entry = next(f for f in json.loads(render_json(report))["findings"] if f["rule"] == "TRAIN012")
    assert entry["overlaps"] == ["TRAIN005"] and entry["gain_together"] == round(idle.gain_together, 4)
    assert "with it: " in render_html(report)
    assert "with it: " in render_report(report, "terminal")


def _finding(rule, gain, expr, env, severity="critical", subject=None, gain_of="step time") -> Finding:
    """A synthetic finding as the engine makes one."""
    return Finding(rule=rule, name="n", category="c", tree="t", severity=severity, title="T", message="m",
                   evidence={}, estimated_gain=gain, gain_of=gain_of, subject=subject, fix="f", verify="v",
                   gain_expr=expr, gain_env=env, gain_known=True)


CATALOGUE = catalogue()  # each share fact's parts of its unit

# synthetic run facts: one rank sets the pace; its step is 30% busy (GEMMs), 60% unexplained idle, 10% launch gaps
RUN = {"gpu_busy_pct": 30.0, "kernel_gemm_pct": 100.0, "idle_unexplained_pct": 60.0, "idle_launch_pct": 10.0,
       "idle_data_pct": 0.0, "idle_sync_pct": 0.0, "idle_breakdown_rank": "1"}


def test_synthetic_straggler_claims_its_own_work_not_the_launch_gaps():
    straggler = _finding("S001", 0.8, "rank_straggler_cost_pct / 100", {"rank_straggler_cost_pct": 80.0},
                         subject=Subject("rank", "1", "rank 1"))
    idle = _finding("U001", 0.6, "idle_unexplained_pct / 100", {"idle_unexplained_pct": 60.0}, severity="warning")
    launch = _finding("L001", 0.1, "idle_launch_pct / 100", {"idle_launch_pct": 10.0}, severity="warning")
    ranked = {f.rule: f for f in arrange([idle, launch, straggler], RUN, CATALOGUE)}
    # own work = busy 30 + unexplained 60 = 90; the straggler claims 80 of it, 8/9 of each part
    assert abs(ranked["U001"].marginal_gain - 0.6 / 9) < 1e-9 and ranked["U001"].overlaps == ["S001"]
    assert ranked["L001"].marginal_gain == 0.1 and not ranked["L001"].overlaps, "launch gaps are not own work"
    # seen from a rank that is not the pace-setter, a straggler's cost is the pace-setter's wait for peers
    waits = dict(RUN, idle_unexplained_pct=20.0, idle_peer_wait_pct=40.0)  # rank 1 waits 40% of its step for rank 0
    other = _finding("S001", 0.4, "rank_straggler_cost_pct / 100", {"rank_straggler_cost_pct": 40.0},
                     subject=Subject("rank", "0", "rank 0"))
    again = {f.rule: f for f in arrange([_finding("U001", 0.2, "idle_unexplained_pct / 100", {"idle_unexplained_pct": 20.0},
                                                  severity="warning"), other], waits, CATALOGUE)}
    assert again["S001"].marginal_gain == 0.4 and again["U001"].marginal_gain == 0.2 and not again["U001"].overlaps


def test_synthetic_shares_declared_nowhere_still_never_exceed_the_unit():
    a = _finding("A001", 0.7, "a_pct / 100", {"a_pct": 70.0})
    b = _finding("B001", 0.6, "b_pct / 100", {"b_pct": 60.0}, severity="warning")
    ranked = arrange([a, b], RUN, CATALOGUE)
    assert [round(f.marginal_gain, 6) for f in ranked] == [0.7, 0.3] and ranked[1].overlaps == ["A001"]


def test_synthetic_memory_bound_kernels_share_the_softmax_with_unfused_attention():
    run = {"gpu_busy_pct": 100.0, "kernel_gemm_pct": 40.0, "kernel_softmax_pct": 40.0, "kernel_elementwise_pct": 20.0}
    attn = _finding("A001", 0.8, "unfused_attention_pct / 100 * 0.8", {"unfused_attention_pct": 100.0})
    mem = _finding("M001", 0.3, "memory_bound_step_pct / 100 * 0.5", {"memory_bound_step_pct": 60.0}, severity="warning")
    ranked = {f.rule: f for f in arrange([mem, attn], run, CATALOGUE)}
    assert ranked["M001"].marginal_gain == 0.0 and ranked["M001"].overlaps == ["A001"]
    assert unit_parts("step time", run)["busy:softmax"] == 40.0


def test_every_shipped_gain_names_a_declared_share_of_its_unit():
    """A run-scoped rule's share must declare its parts (its catalogue entry's share) or its time is only ever
    compared with itself; a subject-scoped one's share is a part of its own, per subject."""
    for rule in load_pack().rules.values():
        if not rule.estimated_gain or rule.scope != "run":
            continue
        names = budget_names(rule.estimated_gain)
        if not names:
            continue
        undeclared = sorted(n for n in names if n not in CATALOGUE or not CATALOGUE[n].share
                            or CATALOGUE[n].share.unit != rule.gain_of)
        assert not undeclared, f"{rule.id}: share {undeclared} of {rule.gain_of} declares no parts (its catalogue entry)"


def test_every_catalogued_share_claims_parts_its_unit_has():
    """A share's parts (its catalogue entry) are parts the ledger sizes: a misspelt part (`idle:comm`)
    would silently make the share a part of its own, counted with nothing else."""
    sizing = {f"kernel_{c}_pct": 1.0 for c in KERNEL_CATEGORIES} | {f: 1.0 for f in IDLE.values()} | {
        "gpu_busy_pct": 1.0, "setup_pct": 1.0, "oom_reserved_free_pct": 1.0, "oom_request_share_pct": 1.0,
        **{f"{o}_share_pct": 1.0 for o in OWNERS}}
    for name, spec in CATALOGUE.items():
        if spec.share is None:
            continue
        known = set(unit_parts(spec.share.unit, sizing))
        assert spec.share.by in PARTS_BY if not spec.share.parts else set(spec.share.parts) <= known, \
            f"{name}: {spec.share} claims parts {spec.share.unit} does not have"
