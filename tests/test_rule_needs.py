"""Rules never go quiet for want of a measurement: every fact a rule's `when` reads is needed, and
a rule missing one is listed as not evaluated. Plus the rule tooling around it: the compiled-pack
cache, binary files given to `rules validate`, and `rules test` on packs and their case paths."""
from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from diagnoser.catalogue import catalogue
from diagnoser.cli import cli
from diagnoser.engine.evaluate import applicable
from diagnoser.engine.records import Record
from diagnoser.pipeline import load_pack
from diagnoser.rulespec.compile import compile_rule
from diagnoser.rulespec.loader import build_pack
from diagnoser.rulespec.model import Condition

ROOT = Path(__file__).resolve().parents[1]
HEALTHY_TRACE = ROOT / "fixtures" / "torch" / "healthy.pt.trace.json.gz"
RULE = """\
tree: demo
rules:
  - id: DEMO001
    name: busy-but-syncing
    title: A demo rule reading a fact it does not declare
    category: host_sync
    severity: warning
    requires: [gpu_busy_pct]
    params: {max_busy: 101, min_syncs: 0}
    when:
      all:
        - {fact: gpu_busy_pct, op: lt, param: max_busy}
        - {fact: syncs_per_step, op: gte, param: min_syncs}
    message: "busy {gpu_busy_pct:.0f}%"
    fix: "fewer syncs"
    verify: "busy above {max_busy}%"
"""
CASES = """\
cases:
  - name: real healthy trace, through a path relative to this file
    input: [inputs/healthy.pt.trace.json.gz]
    fires: [DEMO001]
  - name: synthetic - busy above the threshold
    facts: {gpu_busy_pct: 200.0, syncs_per_step: 1.0}
    silent: [DEMO001]
"""


def _satisfying_values(cond: Condition, out: dict, params: dict, negated: bool = False) -> None:
    """Values that make each test hold (so facts that are present never rule the rule out)."""
    if cond.kind in ("all", "any", "none"):
        for c in cond.items:
            _satisfying_values(c, out, params, negated ^ (cond.kind == "none"))
        return
    if cond.kind != "fact" or cond.fact in out:
        return
    value = params.get(cond.param) if cond.param else cond.value
    if cond.op == "exists":
        if not negated:
            out[cond.fact] = 1.0
        return
    if cond.op in ("lt", "lte", "gt", "gte"):
        above = (cond.op in ("gt", "gte")) != negated
        out[cond.fact] = float(value) + 1.0 if above else float(value) - 1.0
        return
    if cond.op in ("eq", "neq") and isinstance(value, bool):
        out[cond.fact] = value if (cond.op == "eq") != negated else not value
    elif cond.op in ("eq", "neq") and isinstance(value, str):
        out[cond.fact] = value if (cond.op == "eq") != negated else value + "_other"
    elif cond.op == "in":
        out[cond.fact] = value[0] if not negated else "none_of_them"
    elif cond.op == "matches":
        out[cond.fact] = _matching_text(str(value)) if not negated else "~"
    elif cond.op in ("eq", "neq"):
        out[cond.fact] = float(value) if (cond.op == "eq") != negated else float(value) + 1.0
    else:
        out[cond.fact] = 1.0


def _matching_text(pattern: str) -> str:
    """A word the regex finds (its first alternative), for a synthetic value that matches."""
    import re
    for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", re.sub(r"^\(\?[a-z]+\)", "", pattern)):
        if re.search(pattern, word):
            return word
    return "kernel"


def _records(rule, values: dict) -> list[Record]:
    run = Record("run", None, {k: v for k, v in values.items()})
    if rule.scope == "run":
        return [run]
    from diagnoser.facts import Subject
    return [run, Record(rule.scope, Subject(rule.scope, "1", "x"), dict(values))]


def _another_fact_of_the_tree(rule) -> str:
    others = {f for r in load_pack().rules.values() if r.tree == rule.tree for f in r.needs()} - set(rule.needs()) \
        - rule.when.facts()
    return sorted(others)[0] if others else "__unused"


def _in_any(cond: Condition, fact: str, inside: bool = False) -> bool:
    if cond.kind == "fact":
        return inside and cond.fact == fact
    return any(_in_any(c, fact, inside or cond.kind == "any") for c in cond.items)


@pytest.mark.parametrize("rule_id", sorted(load_pack().rules))
def test_every_shipped_rule_with_any_needed_fact_missing_is_not_evaluated(rule_id):
    rule = load_pack().rules[rule_id]
    tree = [r for r in load_pack().rules.values() if r.tree == rule.tree]  # a tree is skipped when none of its facts is here
    cat = catalogue()
    values: dict = {}
    _satisfying_values(rule.when, values, rule.params)
    for f in rule.requires:
        values.setdefault(f, 1.0)
    read = {c for c in rule.when.facts()}
    for fact in sorted(set(rule.requires) | read):
        if fact not in rule.needs():
            continue  # only read under `exists` (a test of presence itself)
        present = {k: v for k, v in values.items() if k != fact}
        present.setdefault(_another_fact_of_the_tree(rule), 1.0)  # the input is one this tree reads
        todo, skipped = applicable(tree, _records(rule, present), cat)
        todo = [r.id for r in todo if r.id == rule.id]
        skipped = [s for s in skipped if s.rule == rule.id]
        if _in_any(rule.when, fact) and not rule.missing(present):
            assert todo == [rule.id], f"{fact}: another branch of its `any` decides"
            continue
        assert [s.rule for s in skipped] == [rule.id], f"{rule_id} without {fact} must be 'not evaluated'"
        assert fact in skipped[0].missing, (fact, skipped[0].missing)
    todo, skipped = applicable(tree, _records(rule, values), cat)
    assert rule.id in [r.id for r in todo] and rule.id not in [s.rule for s in skipped], \
        "with every fact present it is evaluated"


def test_rule_reading_an_undeclared_fact_says_it_needs_it(tmp_path):
    (tmp_path / "demo.yaml").write_text(RULE)
    pack = build_pack(None, [tmp_path / "demo.yaml"], known_facts=catalogue())
    todo, skipped = applicable(pack.rules.values(), [Record("run", None, {"gpu_busy_pct": 40.0})], catalogue())
    assert not todo and skipped[0].missing == ("syncs_per_step",)
    assert "syncs_per_step" in CliRunner().invoke(cli, ["rules", "show", "DEMO001", "--rules", str(tmp_path)]).output


def test_compiled_pack_cache_gives_the_same_rules_and_survives_a_bad_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DIAGNOSER_CACHE_DIR", str(tmp_path / "cache"))
    first = load_pack()
    entries = sorted((tmp_path / "cache").glob("rules-*.json"))
    assert entries, "the validated rule files were cached"
    again = load_pack()
    assert {rid: (r, compile_rule(r)) for rid, r in first.rules.items()} == \
        {rid: (r, compile_rule(r)) for rid, r in again.rules.items()}
    for e in entries:
        e.write_text("{ not json")
    assert load_pack().rules == first.rules, "a corrupt entry is ignored, the file parsed again"
    shutil.rmtree(tmp_path / "cache")
    (tmp_path / "cache").write_text("a file where the cache folder should be")
    assert load_pack().rules == first.rules, "an unwritable cache is skipped"
    from diagnoser.pipeline import Report
    from diagnoser.report.render import render_markdown
    assert render_markdown(Report([], [], [])).startswith("# diagnoser report"), "so is the template cache"
    monkeypatch.setenv("DIAGNOSER_NO_CACHE", "1")
    assert load_pack().rules == first.rules


def test_validate_a_gzip_or_binary_file_is_one_line(tmp_path):
    gz = tmp_path / "rules.yaml.gz"
    gz.write_bytes(gzip.compress(RULE.encode()))
    binary = tmp_path / "blob.yaml"
    binary.write_bytes(b"tree: x\n\xff\xfe\x00junk")
    for path, words in ((gz, "gzip"), (binary, "not UTF-8")):
        result = CliRunner().invoke(cli, ["rules", "validate", str(path)])
        assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
        assert str(path) in result.output and words in result.output and "Traceback" not in result.output


def test_rules_test_on_a_pack_without_test_files_fails(tmp_path):
    (tmp_path / "demo.yaml").write_text(RULE)
    result = CliRunner().invoke(cli, ["rules", "test", str(tmp_path)])
    assert result.exit_code == 1 and "no test cases" in result.output


def test_case_inputs_resolve_against_the_test_file_not_the_current_folder(tmp_path, monkeypatch):
    pack = tmp_path / "pack"
    (pack / "inputs").mkdir(parents=True)
    shutil.copy(HEALTHY_TRACE, pack / "inputs" / HEALTHY_TRACE.name)
    (pack / "demo.yaml").write_text(RULE)
    (pack / "demo.test.yaml").write_text(CASES)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    result = CliRunner().invoke(cli, ["rules", "test", str(pack)])
    assert result.exit_code == 0, result.output
    assert "2 passed, 0 failed" in result.output


def test_healthy_trace_without_syncs_lists_no_sync_rule_as_not_evaluated():
    """kernels_per_sync is undefined without syncs; the measured syncs_per_step (0) already rules
    TRAIN002 out, so it is neither evaluated nor listed as missing an input (Kleene pruning)."""
    from diagnoser.pipeline import diagnose
    report = diagnose([str(HEALTHY_TRACE)])
    facts = {f.name: f.value for f in report.facts if f.subject is None}
    assert "kernels_per_sync" not in facts and facts["syncs_per_step"] < 4
    assert "TRAIN002" not in {n.rule for n in report.not_evaluated}


def test_kernel_rule_some_kernels_cannot_decide_is_listed_for_those():
    """Synthetic two-kernel report: KERN006 (local-memory spills) decided on the kernel that has
    local_memory_share_pct, listed as not decided on the other."""
    from diagnoser.facts import Subject
    rules = [r for r in load_pack().rules.values() if r.tree == "kernel"]
    kern006 = load_pack().rules["KERN006"]
    base = {"sm_throughput_pct": 10.0, "memory_throughput_pct": 80.0, "is_library_kernel": False,
            "kernel_time_share_pct": 30.0}
    spilling = Record("kernel", Subject("kernel", "1", "spill"), dict(base, local_memory_share_pct=50.0))
    unknown = Record("kernel", Subject("kernel", "2", "copy"), dict(base))
    todo, skipped = applicable(rules, [Record("run", None, {}), spilling, unknown], catalogue())
    assert kern006.id in {r.id for r in todo}
    partial = {s.rule: s for s in skipped}[kern006.id]
    assert partial.subjects == "1 of 2 kernels" and partial.missing == ("local_memory_share_pct",)
    assert not partial.collect, "a kernel may lack it because it is undefined there, not unmeasured"


def test_a_warm_start_of_diagnose_on_a_torch_trace_imports_no_yaml_parser_or_schema_validator(tmp_path):
    """Start-up: with the rule files seen before, the command reads the rule pack and the settings' shared
    conditions from the user cache; PyYAML and jsonschema (~0.05 and ~0.07 s to import, plus the parse) stay out."""
    import os
    import subprocess
    import sys

    trace = ROOT / "fixtures" / "torch" / "cal_fp32_to_tf32_before.pt.trace.json.gz"
    probe = ("import sys\nfrom diagnoser.cli import main\ntry:\n    main(sys.argv[1:])\nfinally:\n"
             "    sys.stderr.write('LOADED ' + ' '.join(m for m in ('yaml', 'jsonschema') if m in sys.modules) + '\\n')\n")
    env = dict(os.environ, DIAGNOSER_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    env.pop("DIAGNOSER_NO_CACHE", None)

    def loaded():
        out = subprocess.run([sys.executable, "-c", probe, str(trace), "--format", "md"], env=env,
                             capture_output=True, text=True)
        assert out.returncode == 0 and out.stdout.startswith("# diagnoser report"), out.stderr[-2000:]
        return [line for line in out.stderr.splitlines() if line.startswith("LOADED")][-1].split()[1:]

    assert "yaml" in loaded(), "a cold start parses the rule files"
    assert loaded() == [], "a warm start parses nothing"


def test_a_markdown_report_of_a_torch_trace_leaves_out_what_other_inputs_and_formats_need(tmp_path):
    """Start-up: a torch trace's Markdown report imports no reader, analysis or renderer of another input
    or format (the Nsight Systems reader's sqlite3, the Nsight Compute analysis, comparisons, the HTML page,
    a notebook's iframe escaping), nor difflib (only a misspelt name asks for a suggestion), and compiles
    no pattern only those use (whose code a kernel is: Nsight Compute; the JSON escapes), nor the kernel-name
    patterns of the GPU generation and the framework (its device properties and operators say them), nor the
    timeline's patterns that this trace never reaches (OS calls and samples, GIL waits, attention, model
    classes, serving frameworks: timeline.names.lazy_pattern)."""
    import os
    import subprocess
    import sys

    trace = ROOT / "fixtures" / "torch" / "host_sync.pt.trace.json.gz"
    lazy = ("host_threads.BLOCKING_CALLS", "host_threads.LAUNCH_LIBRARIES", "host_threads.SO_SUFFIX",
            "host_threads.C_LIBRARY", "gil.GIL_WAIT", "gil.WAITING_FRAME", "gil.PY_FRAME", "attention.DELIMITER_OP",
            "attention.ATTENTION_RANGE", "attention.LOG_SOFTMAX", "attention.FUSED_ATTENTION_KERNEL",
            "kernels.OPTIMIZER_KERNEL", "kernels.BACKWARD_KERNEL", "autotune.CONV_KERNEL", "program._ENCODER_MODELS",
            "program._CAUSAL_MODELS", "program._ATTENTION_OPS", "program._KV_CACHE_FRAMES", "measure._PY_FILE",
            "recompiles.COMPILE_ID", "rank_scale.KERNEL_PREFIX", "gaps.OBJECT_ADDRESS", "fix_marks.MATMUL_OP")
    absent = ("sqlite3", "diagnoser.ingest.nsys_sqlite", "diagnoser.ncu.analysis", "diagnoser.comparison",
              "diagnoser.report.html", "html", "difflib", "yaml", "jsonschema", "diagnoser.runs.merge")
    probe = ("import sys\nfrom diagnoser.cli import main\ntry:\n    main(sys.argv[1:])\nfinally:\n"
             "    from diagnoser import kernel_names, text_safety\n"
             f"    got = [m for m in {absent!r} if m in sys.modules]\n"
             "    got += ['origin-patterns'] * kernel_names._origin_res.cache_info().currsize\n"
             "    got += ['json-escapes'] * text_safety._json_any.cache_info().currsize\n"
             "    got += ['arch-patterns'] * kernel_names._arch_res.cache_info().currsize\n"
             "    got += ['framework-patterns'] * kernel_names._framework_res.cache_info().currsize\n"
             "    from diagnoser.timeline import attention, autotune, fix_marks, gaps, gil, host_threads, kernels, "
             "measure, program, rank_scale, recompiles\n"
             f"    got += [n for n in {lazy!r} if eval(n).cache_info().currsize]\n"
             "    sys.stderr.write('LOADED ' + ' '.join(got) + '\\n')\n")
    env = dict(os.environ, DIAGNOSER_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    env.pop("DIAGNOSER_NO_CACHE", None)

    def loaded(fmt):
        out = subprocess.run([sys.executable, "-c", probe, str(trace), "--format", fmt], env=env,
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-2000:]
        return [line for line in out.stderr.splitlines() if line.startswith("LOADED")][-1].split()[1:]

    assert "json-escapes" in loaded("json"), "the JSON report compiles its escapes"  # (and fills the rule cache)
    assert loaded("md") == []


def test_a_lazy_pattern_is_the_compiled_pattern_once():
    """timeline.names.lazy_pattern compiles at the first call and returns the same object every time (the
    name matchers cache their hits per pattern object), equal to what re.compile gives."""
    import re

    from diagnoser.timeline import host_threads
    from diagnoser.timeline.names import lazy_pattern

    get = lazy_pattern(r"^ab+c$", re.I)
    assert get.cache_info().currsize == 0
    first = get()
    assert first is get() and first == re.compile(r"^ab+c$", re.I) and first.match("ABBC")
    assert get.cache_info().currsize == 1
    assert host_threads.BLOCKING_CALLS().match("epoll_wait") and not host_threads.BLOCKING_CALLS().match("cudaLaunchKernel")

