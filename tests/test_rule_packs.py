"""`diagnose rules test rules/` passes: every shipped rule's cases, on real fixtures, hold."""
from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from diagnoser.cli import cli

RULES = Path(__file__).resolve().parents[1] / "rules"


def test_shipped_rule_packs_pass_their_cases():
    result = CliRunner().invoke(cli, ["rules", "test", str(RULES)])
    assert result.exit_code == 0, result.output
    assert " passed, 0 failed" in result.output


def test_every_shipped_tree_has_a_test_file():
    packs = sorted(p.name[:-5] for p in RULES.glob("*.yaml") if not p.name.endswith(".test.yaml")
                   and "\nrules:" in "\n" + p.read_text())  # shared.yaml holds conditions only
    assert set(packs) >= {"train_slow", "inference_slow", "kernel", "oom"}
    for name in packs:
        assert (RULES / f"{name}.test.yaml").exists(), f"rules/{name}.yaml has no {name}.test.yaml"
