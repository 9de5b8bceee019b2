"""A user rule pack's playbook (`my_rules/team.md` beside `my_rules/team.yaml`) reaches every view that
shows playbook text: the HTML report of a real trace the rule fires on, the handbook (with the user
playbook's title and intro for the user's tree), and the report's pointers to `diagnose playbook`."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from diagnoser.cli import cli

REPO = Path(__file__).resolve().parent.parent

RULE = """\
tree: team-budget
rules:
  - id: TEAM001
    name: step-over-time-budget
    title: The training step takes longer than the team's budget
    category: step_time_budget
    severity: warning
    requires: [workload_kind, step_time_ms_p50]
    params:
      max_step_time_ms: 100
    when:
      all:
        - {fact: workload_kind, op: eq, value: training}
        - {fact: step_time_ms_p50, op: gt, param: max_step_time_ms}
    message: "The median step takes {step_time_ms_p50:.1f} ms, over the budget of {max_step_time_ms} ms."
    evidence: [step_time_ms_p50, gpu_busy_pct]
    fix: "Fix the other findings of this report first."
    verify: "Re-profile: step_time_ms_p50 should be at most {max_step_time_ms} ms."
"""

PLAYBOOK = """\
# Team budget playbook
Budgets the platform team plans *cluster time* with.

## TEAM001 step-over-time-budget
### Meaning
The step is slower than the budget the team plans its cluster time with.
### Evidence
`step_time_ms_p50` above `max_step_time_ms`.
### Fix
Work through the other findings of the report, highest gain first.
### Verify
Re-profile the same way: `step_time_ms_p50` at most 100 ms.
"""

# a second rule of the pack that stays silent on the trace (the step is a training step)
QUIET_RULE = """\
tree: team-budget
rules:
  - id: TEAM002
    name: inference-latency-over-budget
    title: An inference step takes longer than the team's budget
    category: step_time_budget
    severity: warning
    requires: [workload_kind, step_time_ms_p50]
    params:
      max_step_time_ms: 5
    when:
      all:
        - {fact: workload_kind, op: eq, value: inference}
        - {fact: step_time_ms_p50, op: gt, param: max_step_time_ms}
    message: "The median step takes {step_time_ms_p50:.1f} ms."
    fix: "Batch requests."
    verify: "Re-profile."
"""


@pytest.fixture
def team_pack(tmp_path, monkeypatch):
    """`my_rules/` with TEAM001 (fires on the real DataLoader-bound Nsight Systems export: its median
    step is 140 ms), its cases and its playbook; `quiet.yaml` holds TEAM002, silent on that trace,
    beside a `quiet.md` that is not UTF-8: reading it would fail, so a report must not need it."""
    pack = tmp_path / "my_rules"
    (pack / "traces").mkdir(parents=True)
    (pack / "team.yaml").write_text(RULE, encoding="utf-8")
    (pack / "team.md").write_text(PLAYBOOK, encoding="utf-8")
    (pack / "team.test.yaml").write_text(
        "cases:\n  - name: slow step (real)\n    input: [traces/slow_step.sqlite.gz]\n    fires: [TEAM001]\n",
        encoding="utf-8")
    (pack / "quiet.yaml").write_text(QUIET_RULE, encoding="utf-8")
    (pack / "quiet.md").write_bytes(b"# Quiet\n\xff\xfe not UTF-8\n")
    shutil.copy(REPO / "fixtures/nsys/dataloader_bound.sqlite.gz", pack / "traces/slow_step.sqlite.gz")
    monkeypatch.chdir(tmp_path)
    return pack


def _invoke(*args) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def _finding_block(html: str, rule: str) -> str:
    """The HTML of the finding card of `rule` (from its heading to the next finding)."""
    cards = re.split(r'<article class="finding', html)[1:]
    (card,) = [c for c in cards if f'data-rule="{rule}"' in c.split(">", 1)[0]]
    return card


def test_html_report_of_a_real_trace_shows_the_user_rules_playbook_meaning_fix_and_verify(team_pack):
    _invoke("my_rules/traces/slow_step.sqlite.gz", "--rules", "my_rules", "-o", "report.html")
    html = Path("report.html").read_text(encoding="utf-8")
    card = _finding_block(html, "TEAM001")
    assert "The median step takes 140.2 ms, over the budget of 100 ms" in card  # it fired on the trace
    assert "<h4>Why it matters</h4>" in card
    assert "The step is slower than the budget the team plans its cluster time with." in card
    assert "Work through the other findings of the report, highest gain first." in card  # the playbook's Fix
    assert "Re-profile the same way: <code>step_time_ms_p50</code> at most 100 ms." in card  # its Verify
    # the pointers name the pack, so the commands they show find the rule
    assert "diagnose playbook TEAM001 --rules my_rules" in card
    assert "diagnose playbook --rules my_rules -o playbooks.html" in card
    # a shipped finding of the same report keeps its shipped section
    assert "<h4>Why it matters</h4>" in _finding_block(html, "TRAIN001")


def test_markdown_report_points_to_the_playbook_command_that_finds_the_user_rule(team_pack):
    text = _invoke("my_rules/traces/slow_step.sqlite.gz", "--rules", "my_rules", "--format", "md")
    assert "Playbook: `diagnose playbook TEAM001 --rules my_rules`" in text
    assert "Playbook: `diagnose playbook TRAIN001`" in text  # a shipped rule needs no pack
    shown = _invoke("playbook", "TEAM001", "--rules", "my_rules")  # and that command works
    assert "The step is slower than the budget" in shown


def test_handbook_titles_the_users_tree_with_its_playbook_title_and_intro(team_pack):
    _invoke("playbook", "--rules", "my_rules/team.yaml", "-o", "handbook.html")
    html = Path("handbook.html").read_text(encoding="utf-8")
    tree = html[html.index('id="tree-team_budget"'):]
    assert tree.startswith('id="tree-team_budget" data-tree="team-budget">\n<h2>Team budget playbook <span class="tag">team-budget</span></h2>')
    assert "Budgets the platform team plans <em>cluster time</em> with." in tree.split('<article')[0]
    assert '<a href="#tree-team_budget">Team budget playbook</a>' in html  # the table of contents
    assert "The step is slower than the budget the team plans its cluster time with." in tree


def test_handbook_of_a_user_tree_without_a_playbook_title_is_titled_by_its_name(team_pack):
    (team_pack / "team.md").write_text(PLAYBOOK.replace("# Team budget playbook\n", ""), encoding="utf-8")
    _invoke("playbook", "--rules", "my_rules/team.yaml", "-o", "handbook.html")
    html = Path("handbook.html").read_text(encoding="utf-8")
    assert '<h2>team-budget <span class="tag">team-budget</span></h2>' in html
    assert "Budgets the platform team plans" in html  # the intro is still the tree's


def test_report_without_a_fired_user_rule_reads_no_user_playbook(team_pack):
    # TEAM001 raised out of reach: no user rule fires, so neither team.md nor quiet.md is needed
    (team_pack / "team.md").write_bytes(b"\xff\xfe")
    _invoke("my_rules/traces/slow_step.sqlite.gz", "--rules", "my_rules", "--param", "TEAM001.max_step_time_ms=1000",
            "-o", "report.html")
    html = Path("report.html").read_text(encoding="utf-8")
    assert 'data-rule="TRAIN001"' in html and 'data-rule="TEAM001"' not in html


def test_a_user_playbook_that_is_not_utf8_is_one_line_naming_it(team_pack):
    (team_pack / "team.md").write_bytes(b"# Team\n\xff\xfe\n")
    result = CliRunner().invoke(cli, ["my_rules/traces/slow_step.sqlite.gz", "--rules", "my_rules", "-o", "report.html"])
    assert result.exit_code == 1
    assert "team.md" in result.output and "UTF-8" in result.output and "Traceback" not in result.output
    assert not Path("report.html").exists()


def test_user_rule_section_is_looked_up_beside_its_own_rule_file_first_then_the_shipped_one(tmp_path):
    # synthetic playbooks: both a.md and b.md document TEAM001; it is b.yaml's rule, so b.md's counts
    from diagnoser.report.playbook import PlaybookLibrary
    for name in ("a", "b"):
        (tmp_path / f"{name}.md").write_text(f"# {name}\n\n## TEAM001 x\n### Meaning\nfrom {name}\n", encoding="utf-8")
    library = PlaybookLibrary({"TEAM001": str(tmp_path / "b.yaml"), "TEAM002": str(tmp_path / "a.yaml")})
    assert library.section("TEAM001").part("meaning") == "from b"
    assert library.section("TEAM002") is None  # documented nowhere
    # a user rule replacing a shipped id, with no section of its own: the shipped section
    replaced = PlaybookLibrary({"TRAIN001": str(tmp_path / "c.yaml")}).section("TRAIN001")
    assert replaced is not None and Path(replaced.path).name == "train_slow.md"
