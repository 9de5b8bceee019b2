"""Pack params (docs/rules.md, Pack params): a threshold several rules read is declared once, under a
rule file's top-level `params:`; a rule that reads the name and does not set it inherits it. On the
shipped rules and on small synthetic rule packs (tmp_path)."""
from __future__ import annotations

import textwrap
from collections import Counter

import pytest

from diagnoser.errors import DiagnoserError, RuleError
from diagnoser.rulespec.loader import build_pack, file_data, rule_files
from diagnoser.resources import rules_dir

SHARED = "max_gpu_busy_pct"


def _shipped(overrides=()):
    from diagnoser.pipeline import load_pack
    return load_pack((), overrides)


def test_a_shared_threshold_is_declared_once():
    """A pack param's value is never restated by a shipped rule or condition (a rule's own value differs),
    and the thresholds the review found repeated (max_gpu_busy_pct: 80 seven times...) are pack params."""
    declared = Counter()
    pack = {}
    for path in rule_files(rules_dir()):
        data = file_data(path)
        pack.update({k: v for k, (v, _) in data["params"].items()})
        for raw, _, _ in data["rules"]:
            declared.update((k, v) for k, v in raw.get("params", {}).items())
        for cond in data["conditions"].values():
            declared.update((k, v) for k, v in cond["params"].items())
    assert {SHARED: 80, "min_ooms": 1, "max_sol_pct": 60, "min_duration_us": 5, "min_sm_pct": 60,
            "max_graph_kernel_pct": 50, "min_idle_launch_pct": 20, "fixed_fp32_gemm_step_pct": 5,
            "min_fp32_gemm_step_pct": 20, "tensor_core_speedup_share": 0.75}.items() <= pack.items()
    restated = sorted(f"{k}: {v}" for (k, v), n in declared.items() if k in pack and pack[k] == v)
    assert not restated, f"pack params restated by a rule or condition: {restated}"


def test_rules_that_read_it_inherit_it_and_say_from_where():
    pack = _shipped()
    readers = sorted(rid for rid, r in pack.rules.items() if SHARED in r.params)
    assert readers == ["INFER003", "TRAIN001", "TRAIN003"]
    for rid in readers:
        assert pack.rules[rid].params[SHARED] == 80
        assert pack.rules[rid].extra["pack_params"][SHARED].startswith(str(rules_dir() / "shared.yaml"))
    assert SHARED not in pack.rules["INFER006"].params  # its texts never name it


def test_param_for_one_rule_and_for_the_pack():
    one = _shipped(["TRAIN001.max_gpu_busy_pct=60"])
    assert one.rules["TRAIN001"].params[SHARED] == 60 and one.rules["TRAIN003"].params[SHARED] == 80
    every = _shipped(["max_gpu_busy_pct=70"])
    assert {rid: every.rules[rid].params[SHARED] for rid in ("INFER003", "TRAIN001", "TRAIN003")} == \
        {"INFER003": 70, "TRAIN001": 70, "TRAIN003": 70}
    assert every.params == [{"pack_param": SHARED, "value": 70, "default": 80, "rules": ["INFER003", "TRAIN001", "TRAIN003"]}]
    with pytest.raises(DiagnoserError, match="no pack param min_nothing"):
        _shipped(["min_nothing=3"])


def _pack(tmp_path, files: dict[str, str]):
    for name, text in files.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    return tmp_path


RULES = """\
    tree: synthetic-tree
    rules:
      - id: SYN001
        name: busy-low
        title: GPU busy low
        category: synthetic
        severity: warning
        {params}
        when: {{fact: gpu_busy_pct, op: lt, param: max_busy_pct}}
        message: "busy {{gpu_busy_pct:.0f}}% below {{max_busy_pct}}%"
        fix: synthetic
        verify: synthetic
    """


def test_a_rules_own_param_wins_and_a_user_pack_replaces_the_shipped_one(tmp_path):
    """Synthetic packs: a rule's own `params:` beat the pack param; a user pack's pack param replaces the
    shipped pack's for every rule that inherits it."""
    (tmp_path / "shipped").mkdir()
    shipped = _pack(tmp_path / "shipped", {
        "a.yaml": RULES.format(params=""), "p.yaml": "params: {max_busy_pct: 50}\n"})
    assert build_pack(shipped).rules["SYN001"].params == {"max_busy_pct": 50}
    (shipped / "a.yaml").write_text(textwrap.dedent(RULES.format(params="params: {max_busy_pct: 30}")))
    assert build_pack(shipped).rules["SYN001"].params == {"max_busy_pct": 30}
    (shipped / "a.yaml").write_text(textwrap.dedent(RULES.format(params="")))
    (tmp_path / "user").mkdir()
    user = _pack(tmp_path / "user", {"u.yaml": "params: {max_busy_pct: 40}\n"})
    assert build_pack(shipped, [user]).rules["SYN001"].params == {"max_busy_pct": 40}


def test_two_files_of_one_pack_setting_one_name_is_an_error(tmp_path):
    pack = _pack(tmp_path, {"a.yaml": RULES.format(params=""), "p.yaml": "params: {max_busy_pct: 50}\n",
                            "q.yaml": "params: {max_busy_pct: 60}\n"})
    with pytest.raises(RuleError, match="pack param `max_busy_pct` is also set in"):
        build_pack(pack)


def test_an_unset_name_is_still_an_error(tmp_path):
    pack = _pack(tmp_path, {"a.yaml": RULES.format(params=""), "p.yaml": "params: {other_pct: 50}\n"})
    with pytest.raises(RuleError, match="param `max_busy_pct` is not defined"):
        build_pack(pack)


def test_a_condition_param_that_moved_to_the_pack_still_takes_condition_overrides():
    """`--param CONDITION.NAME=V` of a threshold now declared for the pack sets it for the condition's rules."""
    pack = _shipped(["fp32-matmul-without-tensor-cores.min_fp32_gemm_step_pct=10"])
    assert pack.rules["TRAIN008"].params["min_fp32_gemm_step_pct"] == 10
    assert pack.rules["INFER007"].params["min_fp32_gemm_step_pct"] == 10
    assert pack.rules["TRAIN017"].params["min_fp32_gemm_step_pct"] == 20  # the sister condition's rule
