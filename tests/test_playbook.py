"""Playbooks: every shipped rule has its section and every section names a shipped rule; the
Markdown subset renders escaped HTML; `diagnose playbook` writes the handbook of every rule in
force, custom rules included, with their conditions in words."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from diagnoser.catalogue import catalogue
from diagnoser.cli import cli
from diagnoser.resources import playbooks_dir, rules_dir
from diagnoser.rulespec.loader import build_pack, load_rule_file, rule_files
from diagnoser.report.playbook import (condition_text, describe_condition, fill_params, load_playbooks,
                                       parse_playbook, render_inline, render_markdown, sections_by_rule, tree_file)

from test_html_report import check_html, visible_text

REQUIRED_PARTS = ("meaning", "evidence", "fix", "verify")


def shipped_rules() -> dict:
    rules = {}
    for path in rule_files(rules_dir()):
        for rule in load_rule_file(path, catalogue(), shipped=True):
            rules[rule.id] = rule
    return rules


def all_sections():
    return [s for book in load_playbooks().values() for s in book.sections]


# ------------------------------------------------------------------------------ shipped content

def test_every_shipped_rule_has_a_playbook_section():
    rules = shipped_rules()
    sections = sections_by_rule(load_playbooks())
    missing = [f"{r.id} ({Path(r.path).name}:{r.line}) -> add `## {r.id} {r.name}` to playbooks/{tree_file(r.tree)}.md"
               for r in rules.values() if r.id not in sections]
    assert not missing, "rules without a playbook section:\n" + "\n".join(missing)


def test_every_playbook_section_names_a_shipped_rule():
    rules = shipped_rules()
    orphans = [f"{Path(s.path).name}:{s.line}: `## {s.rule or ''} {s.name}`".replace("  ", " ")
               for s in all_sections() if s.rule not in rules]
    assert not orphans, "playbook sections naming no shipped rule:\n" + "\n".join(orphans)


def test_every_rule_is_documented_once_in_its_own_trees_playbook():
    rules = shipped_rules()
    seen: dict[str, str] = {}
    problems = []
    for s in all_sections():
        if s.rule in seen:
            problems.append(f"{s.rule} documented twice ({seen[s.rule]} and {Path(s.path).name}:{s.line})")
        seen[s.rule] = f"{Path(s.path).name}:{s.line}"
        rule = rules.get(s.rule)
        if rule and Path(s.path).stem != tree_file(rule.tree):
            problems.append(f"{s.rule} is in {Path(s.path).name}, its tree {rule.tree} wants {tree_file(rule.tree)}.md")
        if rule and s.name and s.name != rule.name:
            problems.append(f"{Path(s.path).name}:{s.line}: heading says `{s.name}`, rule {s.rule} is `{rule.name}`")
    assert not problems, "\n".join(problems)


def test_every_playbook_section_has_meaning_evidence_fix_and_verify():
    problems = [f"{Path(s.path).name}:{s.line}: {s.rule} has no `### {part.capitalize()}` text"
                for s in all_sections() for part in REQUIRED_PARTS if not s.part(part)]
    assert not problems, "\n".join(problems)


def test_shipped_playbooks_render_to_balanced_html():
    for book in load_playbooks().values():
        for s in book.sections:
            for part, md in s.parts.items():
                html = f"<!DOCTYPE html><html><head><title>t</title></head><body>{render_markdown(md)}</body></html>"
                check_html(html)


# ------------------------------------------------------------------------------ parsing

PLAYBOOK = textwrap.dedent("""\
    # Training is slow

    Intro with `code`.

    ## TRAIN001 gpu-starved-by-input-pipeline

    ### Meaning
    The GPU waits.

    ### Fix
    ```bash
    ## this is a shell comment, not a section
    python train.py --workers 8
    ```

    ### Verify
    Re-profile.

    ## `TRAIN002` - host-sync-in-step-loop

    ### Meaning
    Syncs.

    ## Appendix
    Not a rule.
    """)


def test_parser_splits_rule_sections_and_ignores_headings_inside_code():
    book = parse_playbook(PLAYBOOK, "train_slow.md")
    assert book.title == "Training is slow" and book.intro == "Intro with `code`."
    assert [(s.rule, s.name, s.line) for s in book.sections] == [
        ("TRAIN001", "gpu-starved-by-input-pipeline", 5), ("TRAIN002", "host-sync-in-step-loop", 19), (None, "Appendix", 24)]
    first = book.sections[0]
    assert first.part("meaning") == "The GPU waits."
    assert "## this is a shell comment" in first.part("fix") and first.part("verify") == "Re-profile."


# ------------------------------------------------------------------------------ Markdown subset

def test_markdown_escapes_text_and_keeps_code_verbatim():
    html = render_markdown(textwrap.dedent("""\
        Use `x < y && f<int>()` and <script>alert(1)</script>, **bold** and *em*; snake_case_name stays.

        ```python
        if a < b:
            print("<tag>")
        ```
        """))
    assert "<code>x &lt; y &amp;&amp; f&lt;int&gt;()</code>" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>" not in html
    assert "<strong>bold</strong>" in html and "<em>em</em>" in html and "snake_case_name" in html
    assert '<pre><code class="language-python">if a &lt; b:\n    print(&#34;&lt;tag&gt;&#34;)</code></pre>' in html


def test_markdown_lists_nest_and_hold_code_blocks():
    html = render_markdown(textwrap.dedent("""\
        1. Install:
           ```sh
           pip install x \\
             --pre
           ```
        2. Then
           - nested `item`
        - another list
        """))
    assert html.startswith("<ol><li><p>Install:</p>\n<pre><code")
    assert "pip install x \\\n  --pre</code></pre>" in html
    assert "<ul><li><p>nested <code>item</code></p></li></ul></li></ol>" in html
    assert html.endswith("<ul><li><p>another list</p></li></ul>")


def test_markdown_links_tables_headings_and_quotes():
    html = render_markdown(textwrap.dedent("""\
        ### Sub heading
        See [the docs](https://pytorch.org/docs/stable/data.html) or [bad](javascript:alert(1)).

        | option | effect |
        |---|---|
        | `a|b` | x \\| y |

        > quoted *text*
        """), heading_offset=1)
    assert "<h4>Sub heading</h4>" in html
    assert '<a href="https://pytorch.org/docs/stable/data.html">the docs</a>' in html
    assert 'href="javascript' not in html and "bad (javascript:alert(1)" in html
    assert "<td><code>a|b</code></td><td>x | y</td>" in html
    assert "<blockquote><p>quoted <em>text</em></p></blockquote>" in html


def test_inline_rendering_of_rule_text():
    assert render_inline("Set `num_workers=8` <b>now</b>") == "Set <code>num_workers=8</code> &lt;b&gt;now&lt;/b&gt;"


# ------------------------------------------------------------------------------ rules in words

DOC_RULE = textwrap.dedent("""\
    tree: train-slow
    rules:
      - id: TRAIN001
        name: gpu-starved-by-input-pipeline
        title: The GPU waits for the input pipeline
        category: input_pipeline
        severity: critical
        requires: [gpu_busy_pct, idle_data_pct]
        params: {max_gpu_busy_pct: 70, min_idle_data_pct: 20}
        when:
          all:
            - {fact: gpu_busy_pct, op: lt, param: max_gpu_busy_pct}
            - {fact: idle_data_pct, op: gte, param: min_idle_data_pct}
            - none:
                - {finding: TRAIN002}
                - {fact: workload_kind, op: in, value: [inference, eval]}
        message: "GPU busy {gpu_busy_pct:.0f}%"
        fix: "Use workers."
        verify: "idle_data_pct below {min_idle_data_pct}% and busy above {max_gpu_busy_pct:.0f}%; now {gpu_busy_pct}."
      - id: TRAIN002
        name: host-sync-in-step-loop
        title: The host blocks on the GPU
        category: host_sync
        severity: critical
        when: {fact: step_detection, op: matches, value: "^prof"}
        message: "x"
        fix: "f"
        verify: "v"
    """)


@pytest.fixture
def doc_rules(tmp_path):
    path = tmp_path / "doc.yaml"
    path.write_text(DOC_RULE)
    return build_pack(None, [path], ["TRAIN001.max_gpu_busy_pct=60"], known_facts=catalogue())


def test_conditions_read_as_words_with_thresholds_in_force(doc_rules):
    r1, r2 = doc_rules.rules["TRAIN001"], doc_rules.rules["TRAIN002"]
    assert condition_text(r1.when, r1.params) == (
        'gpu_busy_pct < 60 (max_gpu_busy_pct) and idle_data_pct \u2265 20 (min_idle_data_pct) and '
        'not (TRAIN002 fired or workload_kind is one of "inference", "eval")')
    node = describe_condition(r1.when, r1.params, {"TRAIN002": r2.title})
    assert node["text"] == "all of:" and node["items"][2]["items"][0] == {
        "text": "TRAIN002 fired (The host blocks on the GPU)", "ref": "TRAIN002", "items": []}
    assert condition_text(r2.when, r2.params) == "step_detection matches /^prof/"


def test_fix_and_verify_templates_fill_params_and_keep_fact_placeholders(doc_rules):
    r1 = doc_rules.rules["TRAIN001"]
    assert fill_params(r1.verify, r1.params) == "idle_data_pct below 20% and busy above 60%; now {gpu_busy_pct}."


# ------------------------------------------------------------------------------ the handbook

CUSTOM = textwrap.dedent("""\
    tree: my-team
    rules:
      - id: TEAM001
        name: gpu-mostly-idle
        title: The GPU is mostly idle <for us>
        category: team_idle
        severity: warning
        requires: [gpu_busy_pct]
        params: {max_gpu_busy_pct: 50}
        when:
          all:
            - {fact: gpu_busy_pct, op: lt, param: max_gpu_busy_pct}
        message: "GPU busy {gpu_busy_pct:.0f}%"
        fix: "Ask the team: `make faster` <now>"
        verify: "gpu_busy_pct above {max_gpu_busy_pct}%"
        refs: ["https://example.org/team-runbook", "javascript:alert(1)"]
    """)


def _handbook(tmp_path, *args) -> str:
    out = tmp_path / "playbooks.html"
    result = CliRunner().invoke(cli, ["playbook", *args, "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out.read_text(encoding="utf-8")


def test_handbook_documents_every_shipped_rule(tmp_path):
    html = _handbook(tmp_path)
    checker = check_html(html)
    rules = shipped_rules()
    assert set(checker.attr_values("article", "data-rule")) == set(rules)
    text = visible_text(checker)
    sections = sections_by_rule(load_playbooks())
    for rid, rule in rules.items():
        assert f'id="{rule.playbook_anchor}"' in html
        for name in rule.params:
            assert f"({name})" in text or name in text
        if rid in sections and sections[rid].part("meaning"):
            assert " ".join(sections[rid].part("meaning").split()[:3]).replace("`", "").replace("*", "") in text
    # every tree gets its own section, shipped trees in the documented order
    trees = checker.attr_values("section", "data-tree")
    assert trees[:4] == [t for t in ("train-slow", "inference-slow", "kernel", "oom") if t in trees[:4]]


def test_handbook_includes_a_custom_rule_without_a_playbook_section(tmp_path):
    path = tmp_path / "team.yaml"
    path.write_text(CUSTOM)
    html = _handbook(tmp_path, "--rules", str(path))
    checker = check_html(html)
    text = visible_text(checker)
    assert "team001" in checker.ids and "tree-my_team" in checker.ids
    assert "The GPU is mostly idle <for us>" in text and "custom rule" in text
    assert "gpu_busy_pct < 50 (max_gpu_busy_pct)" in text
    assert "Ask the team: make faster <now>" in text and "gpu_busy_pct above 50%" in text
    assert "no playbook section" in text
    assert "https://example.org/team-runbook" in checker.attr_values("a", "href")
    assert not any(h.startswith("javascript") for h in checker.attr_values(name="href"))


def test_handbook_uses_a_playbook_beside_a_custom_rule_file(tmp_path):
    (tmp_path / "team.yaml").write_text(CUSTOM)
    (tmp_path / "team.md").write_text(textwrap.dedent("""\
        # Team playbook
        ## TEAM001 gpu-mostly-idle
        ### Meaning
        Our cluster's GPUs idle when *the NFS* is slow.
        ### Evidence
        `gpu_busy_pct`
        ### Fix
        ```bash
        mount -o remount,rsize=1048576 /data
        ```
        ### Verify
        gpu_busy_pct above 50%.
        """))
    text = visible_text(check_html(_handbook(tmp_path, "--rules", str(tmp_path / "team.yaml"))))
    assert "Our cluster's GPUs idle when the NFS is slow." in text
    assert "mount -o remount,rsize=1048576 /data" in text and "team.md:2" in text


def test_shipped_playbooks_are_found_inside_the_package():
    assert playbooks_dir().is_dir() and any(playbooks_dir().glob("*.md"))
