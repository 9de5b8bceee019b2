"""docs/rules.md stays true: its category table is the shipped rules' categories, its field, op,
shared-condition and test-case tables are what the schema, the loader and `diagnose rules test`
accept, the paths and commands it names exist, and its example rule pack validates, passes its
own cases and has its playbook section."""
from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner

from diagnoser.cli import cli
from diagnoser.report.playbook import PART_NAMES, parse_playbook
from diagnoser.resources import rules_dir
from diagnoser.cli import rule_tests as testing
from diagnoser.rulespec import schema
from diagnoser.rulespec.loader import build_pack, file_data
from diagnoser.rulespec.operators import OPS, TREND_OPS

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "rules.md"
TEXT = DOC.read_text(encoding="utf-8")


def section(title: str) -> str:
    """The text of `## title` up to the next `## ` heading (fences respected)."""
    out, inside, fence = [], False, False
    for line in TEXT.splitlines():
        if line.startswith("```"):
            fence = not fence
        if not fence and line.startswith("## "):
            if inside:
                break
            inside = line[3:].strip() == title
            continue
        if inside:
            out.append(line)
    assert out, f"docs/rules.md has no `## {title}` section"
    return "\n".join(out)


def table(text: str, first_header: str) -> list[list[str]]:
    """Rows (cells stripped) of the Markdown table whose first header cell is `first_header`."""
    rows, on = [], False
    for line in text.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]] if line.startswith("|") else None
        if cells is None:
            if on:
                break
            continue
        if not on:
            on = cells[0] == first_header
            continue
        if set("".join(cells)) <= set("-: "):
            continue
        rows.append(cells)
    assert rows, f"no table headed `{first_header}` found"
    return rows


def code(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def shipped_pack():
    from diagnoser.catalogue import catalogue
    return build_pack(rules_dir(), known_facts=catalogue())


# ------------------------------------------------------------------------------ categories

def test_category_table_lists_exactly_the_categories_the_shipped_rules_report_and_their_trees():
    pack = shipped_pack()
    used: dict[str, set[str]] = {}
    for rule in pack.rules.values():
        used.setdefault(rule.category, set()).add(rule.tree)
    documented = {}
    for row in table(section("Categories"), "category"):
        (name,) = code(row[0])
        documented[name] = {t.strip() for t in row[1].split(",")}
    pattern = re.compile(schema.RULE["properties"]["category"]["pattern"])
    bad_names = sorted(c for c in documented if not pattern.match(c))
    assert not bad_names, f"docs/rules.md lists categories the schema rejects: {bad_names}"
    missing = sorted(set(used) - set(documented))
    assert not missing, ("categories used by shipped rules but missing from docs/rules.md, Categories: "
                         + "; ".join(f"add | `{c}` | {', '.join(sorted(used[c]))} | ... |" for c in missing))
    stale = sorted(set(documented) - set(used))
    assert not stale, f"docs/rules.md, Categories lists categories no shipped rule reports: {stale}"
    wrong = [f"`{c}`: docs say {', '.join(sorted(documented[c]))}; rules: {', '.join(sorted(used[c]))}"
             for c in used if documented[c] != used[c]]
    assert not wrong, "docs/rules.md, Categories names the wrong trees:\n" + "\n".join(wrong)


def test_docs_point_to_no_file_outside_the_repository():
    assert "corpus README" not in TEXT
    for target in re.findall(r"\]\(([^)#\s]+)", TEXT):  # relative links resolve from docs/
        if not target.startswith(("http://", "https://")):
            assert (DOC.parent / target).resolve().is_relative_to(REPO), target
            assert (DOC.parent / target).exists(), f"docs/rules.md links to {target}, which does not exist"


def test_every_anchor_link_names_a_heading_of_the_page():
    def slug(heading: str) -> str:  # GitHub's: lower case, punctuation dropped, spaces -> dashes
        return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
    text = re.sub(r"```.*?```", "", TEXT, flags=re.S)
    anchors = {slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}
    missing = sorted(set(re.findall(r"\]\(#([^)]+)\)", TEXT)) - anchors)
    assert not missing, f"docs/rules.md links to anchors no heading makes: {missing}"


# ------------------------------------------------------------------------------ the rule schema

def test_rule_field_table_is_the_schema_with_its_required_fields():
    rows = {code(r[0])[0]: r for r in table(section("Rule fields"), "field")}
    props = schema.RULE["properties"]
    assert set(rows) == set(props), (f"docs/rules.md, Rule fields: missing {sorted(set(props) - set(rows))}, "
                                     f"not in the schema {sorted(set(rows) - set(props))}")
    required = {name for name, row in rows.items() if row[1] == "required"}
    assert required == set(schema.RULE["required"])


def test_rule_file_key_table_is_the_schema():
    rows = {code(r[0])[0] for r in table(section("A rule file"), "key")}
    assert rows == set(schema.RULE_FILE["properties"])


def test_conditions_table_names_every_op_and_condition_form():
    text = section("Conditions")
    forms = {branch["required"][0] for branch in schema.CONDITION["oneOf"]}
    for key in forms:
        assert re.search(rf"\{{{key}:", text), f"docs/rules.md, Conditions does not show `{{{key}: ...}}`"
    for op in OPS:
        assert re.search(rf"(?<![\w]){op}(?![\w])", text), f"docs/rules.md, Conditions does not name op `{op}`"
    for op in TREND_OPS:
        assert f"`{op}`" in section("verify_check"), f"docs/rules.md, verify_check does not name `{op}`"


def test_shared_condition_table_is_rules_shared_yaml_with_the_rules_that_use_it():
    shared = file_data(rules_dir() / "shared.yaml")["conditions"]
    pack_params = file_data(rules_dir() / "shared.yaml")["params"]  # docs/rules.md, Pack params
    pack = shipped_pack()
    users: dict[str, set[str]] = {}
    for rule in pack.rules.values():
        for name in rule.extra.get("conditions", ()):
            users.setdefault(name, set()).add(rule.id)
    rows = {code(r[0])[0]: r for r in table(section("Shared conditions"), "condition")}
    assert set(rows) == set(shared), (f"docs/rules.md, Shared conditions: missing {sorted(set(shared) - set(rows))}, "
                                      f"not in rules/shared.yaml {sorted(set(rows) - set(shared))}")
    for name, row in rows.items():
        listed = set(re.findall(r"[A-Z][A-Z0-9]*\d{3}", row[2]))
        assert listed == users.get(name, set()), f"`{name}` is used by {sorted(users.get(name, ()))}, docs say {sorted(listed)}"
        for param in code(row[1]):
            assert param in shared[name]["params"] or param in pack_params, f"`{name}` has no param `{param}`"


def test_guarded_trees_are_the_ones_the_docs_say():
    """The workload_kind section: every train-slow / inference-slow rule but TRAIN005 is guarded
    with the value of its tree, as an item of its top-level `all`; kernel and oom rules never read it."""
    want = {"train-slow": "training", "inference-slow": "inference"}
    for rule in shipped_pack().rules.values():
        top = [c for c in rule.when.items if rule.when.kind == "all" and c.kind == "fact" and c.fact == "workload_kind"]
        if rule.tree in want and rule.id != "TRAIN005":
            assert [(c.op, c.value) for c in top] == [("eq", want[rule.tree])], rule.id
            assert "workload_kind" in rule.requires, rule.id
        else:
            assert "workload_kind" not in rule.when.facts(), rule.id
    assert "`TRAIN005`" in section("The workload_kind guard")


# ------------------------------------------------------------------------------ test cases

def _case_keys_read_by_rules_test() -> set[str]:
    src = Path(testing.__file__).read_text(encoding="utf-8")
    return set(re.findall(r"case\.get\(\"(\w+)\"", src)) | set(re.findall(r"case\[\"(\w+)\"\]", src)) \
        | set(re.findall(r"\"(\w+)\" in case\b", src))


def test_test_case_table_is_every_key_rules_test_accepts_and_reads():
    rows = [code(r[0])[0] for r in table(section("Test cases"), "key")]
    assert rows == list(testing.CASE_KEYS)
    assert set(testing.CASE_KEYS) == _case_keys_read_by_rules_test()


def test_example_cases_use_only_keys_rules_test_reads():
    keys = set(testing.CASE_KEYS)
    for block in yaml_blocks():
        for case in (yaml.safe_load(block) or {}).get("cases") or []:
            assert set(case) <= keys, f"example case {case.get('name')}: unknown keys {sorted(set(case) - keys)}"


# ------------------------------------------------------------------------------ paths and commands

def yaml_blocks() -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", TEXT, re.S)


def test_every_repository_path_the_docs_name_exists():
    paths = set()
    for token in re.findall(r"`([^`\s]+)`", TEXT) + re.findall(r"input: \[([^\]]+)\]", TEXT):
        if re.match(r"(rules|playbooks|docs|fixtures|tests|diagnoser|benchmarks|tools)/", token):
            paths.add(token.split("#")[0])
    placeholders = re.compile(r"NAME|TREE|ID\b|x\.gz")
    missing = sorted(p for p in paths if not placeholders.search(p) and not (REPO / p).exists())
    assert not missing, f"docs/rules.md names paths that do not exist: {missing}"


def _commands() -> list[list[str]]:
    """Every `diagnose ...` the docs show, inline or in a bash block, as argument lists."""
    lines = re.findall(r"`(diagnose [^`]+)`", TEXT)
    for block in re.findall(r"```bash\n(.*?)```", TEXT, re.S):
        lines += [ln.split("#")[0] for ln in block.splitlines() if ln.startswith("diagnose ")]
    out = []
    for line in lines:
        words = shlex.split(line.replace("|", " "))[1:]
        out.append(words)
    return out


def test_every_command_and_option_the_docs_show_exists():
    problems = []
    for words in _commands():
        cmd: click.Command = cli
        rest = list(words)
        while isinstance(cmd, click.Group):
            if rest and rest[0] in cmd.commands:
                cmd = cmd.commands[rest.pop(0)]
            elif cmd is cli:
                cmd = cli.commands["run"]  # `diagnose FILE...`
            else:  # `diagnose rules list|show|test`: every word a subcommand
                names = [w for w in rest if w in cmd.commands]
                if not names:
                    problems.append(f"diagnose {' '.join(words)}: no such command")
                cmd = None
                break
        if cmd is None:
            continue
        options = {o for p in cmd.params for o in getattr(p, "opts", []) + getattr(p, "secondary_opts", [])}
        for w in rest:
            if w.startswith("-") and w.split("=")[0] not in options:
                problems.append(f"diagnose {' '.join(words)}: `{cmd.name}` has no option {w}")
    assert not problems, "\n".join(problems)


# ------------------------------------------------------------------------------ the example pack

def _labelled_block(label: str) -> str:
    m = re.search(rf"^`{re.escape(label)}`[^`]*?:\n\n```\w+\n(.*?)```", TEXT, re.S | re.M)
    assert m, f"docs/rules.md shows no block labelled `{label}`"
    return m.group(1)


@pytest.fixture
def example_pack(tmp_path, monkeypatch):
    pack = tmp_path / "my_rules"
    for name in ("team.yaml", "team.test.yaml", "team.md"):
        (pack / name).parent.mkdir(parents=True, exist_ok=True)
        (pack / name).write_text(_labelled_block(f"my_rules/{name}"), encoding="utf-8")
    # the real trace the example case names: the repository's dataloader-bound training step
    (pack / "traces").mkdir()
    shutil.copy(REPO / "fixtures/nsys/dataloader_bound.sqlite.gz", pack / "traces/slow_step.sqlite.gz")
    monkeypatch.chdir(tmp_path)
    return pack


def _then_commands() -> list[tuple[list[str], str]]:
    block = re.search(r"Then:\n\n```bash\n(.*?)```", TEXT, re.S).group(1)
    out = []
    for line in block.splitlines():
        cmd, _, expect = line.partition("#")
        out.append((shlex.split(cmd)[1:], expect.strip()))
    return out


def test_example_pack_validates_passes_its_cases_and_prints_its_playbook(example_pack):
    runner = CliRunner()
    ran = 0
    for args, expect in _then_commands():
        if not all(Path(a).exists() or a.startswith("-") or a.isupper() or a in cli.commands
                   or a in cli.commands["rules"].commands for a in args):
            continue  # `diagnose run.sqlite ...`: a trace of the reader's own
        result = runner.invoke(cli, args)
        assert result.exit_code == 0, f"diagnose {' '.join(args)}:\n{result.output}"
        for part in re.split(r"\s*\.\.\.\s*", expect):
            if part and " " in part and not part.startswith("the "):
                assert part in result.output, f"diagnose {' '.join(args)}: expected {part!r}:\n{result.output}"
        ran += 1
    assert ran == 3
    shown = runner.invoke(cli, ["playbook", "TEAM001", "--rules", "my_rules"]).output
    assert "The step is slower than the budget" in shown and "step_time_ms_p50 > 100 (max_step_time_ms)" in shown


def test_example_pack_fires_on_the_slow_step_until_its_budget_is_raised(example_pack):
    import json

    def run(*extra):
        result = CliRunner().invoke(cli, ["my_rules/traces/slow_step.sqlite.gz", "--rules", "my_rules",
                                          "--format", "json", *extra])
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    fired = [f for f in run()["findings"] if f["rule"] == "TEAM001"]
    assert len(fired) == 1 and fired[0]["category"] == "step_time_budget"
    assert "The median step takes 140.2 ms, over the budget of 100 ms" in fired[0]["message"]
    assert fired[0]["severity"] == "warning"  # no estimated_gain: the gain floor leaves it a warning
    raised = run("--param", "TEAM001.max_step_time_ms=1000")  # the override the example's comment shows
    assert not [f for f in raised["findings"] if f["rule"] == "TEAM001"]
    assert raised["settings"]["params"] == [{"rule": "TEAM001", "param": "max_step_time_ms", "value": 1000, "default": 100}]


def test_example_pack_playbook_reaches_the_html_report_and_heads_its_tree_in_the_handbook(example_pack):
    """What the docs say after `Then:`: the report shows TEAM001's section, the handbook the title and intro."""
    book = parse_playbook(_labelled_block("my_rules/team.md"))
    (sec,) = book.sections
    runner = CliRunner()
    result = runner.invoke(cli, ["my_rules/traces/slow_step.sqlite.gz", "--rules", "my_rules", "-o", "report.html"])
    assert result.exit_code == 0, result.output
    report = Path("report.html").read_text(encoding="utf-8")
    card = next(c for c in report.split('<article class="finding')[1:] if 'data-rule="TEAM001"' in c.split(">", 1)[0])
    assert sec.part("meaning") in card and sec.part("fix") in card
    assert "diagnose playbook TEAM001 --rules my_rules" in card
    result = runner.invoke(cli, ["playbook", "--rules", "my_rules", "-o", "playbooks.html"])
    assert result.exit_code == 0, result.output
    handbook = Path("playbooks.html").read_text(encoding="utf-8")
    tree = handbook[handbook.index('id="tree-team_budget"'):].split("<article")[0]
    assert f"<h2>{book.title} " in tree and "The budgets the team plans its cluster time with" in tree


def test_playbook_format_example_parses_into_a_section_with_its_four_parts():
    block = re.search(r"### The format\n\n```markdown\n(.*?)```", TEXT, re.S).group(1)
    book = parse_playbook(block)
    assert book.title and book.intro
    (sec,) = book.sections
    assert sec.rule == "TRAIN001" and sec.name == "gpu-starved-by-input-pipeline" and sec.part("")
    assert all(sec.part(p) for p in PART_NAMES)


def test_every_whole_rule_file_in_the_docs_loads(tmp_path):
    """Blocks that are whole rule files (rules as mappings, or shared conditions) pass the schema;
    a rule file's rules also pass the loader's checks against the facts catalogue."""
    from diagnoser.catalogue import catalogue
    checked = 0
    for i, block in enumerate(yaml_blocks()):
        data = yaml.safe_load(block)
        if not isinstance(data, dict):
            continue
        rules = data.get("rules")
        if rules is not None and not all(isinstance(r, dict) for r in rules):
            continue  # `rules: [...]`: a fragment
        if rules is None and "conditions" not in data:
            continue
        path = tmp_path / f"block{i}.yaml"
        path.write_text(block, encoding="utf-8")
        file_data(path)  # schema
        if rules:
            build_pack(rules_dir(), [path], known_facts=catalogue())
        checked += 1
    assert checked >= 2


def test_validate_errors_shown_in_the_docs_are_what_validate_says_on_the_example(example_pack):
    """The two errors the docs show: the example without `verify`, and with a literal threshold."""
    shown = re.search(r"```text\n(.*?)```", section("Rule fields"), re.S).group(1).splitlines()
    rule = (example_pack / "team.yaml").read_text(encoding="utf-8")
    broken = [re.sub(r"\n    verify: .*", "", rule),
              rule.replace("op: gt, param: max_step_time_ms}", "op: gt, value: 100}")]
    assert broken[0] != rule and broken[1] != rule
    for text, line in zip(broken, shown):
        (example_pack / "team.yaml").write_text(text, encoding="utf-8")
        result = CliRunner().invoke(cli, ["rules", "validate", "my_rules/team.yaml"])
        assert result.exit_code == 1 and result.output.strip() == line, result.output


def test_scope_error_shown_in_the_docs_is_what_validate_says_on_the_example(example_pack):
    """The example with `scope: kernels` (a typo) is rejected as the docs show, not left to never run."""
    blocks = re.findall(r"```text\n(.*?)```", section("Rule fields"), re.S)
    (shown,) = [b.strip() for b in blocks if "unknown scope" in b]
    rule = (example_pack / "team.yaml").read_text(encoding="utf-8")
    broken = re.sub(r"(\n    severity: .*)", r"\1\n    scope: kernels", rule, count=1)
    assert broken != rule
    (example_pack / "team.yaml").write_text(broken, encoding="utf-8")
    result = CliRunner().invoke(cli, ["rules", "validate", "my_rules/team.yaml"])
    assert result.exit_code == 1 and result.output.strip() == shown, result.output


def test_scope_table_is_the_scopes_the_schema_accepts():
    from diagnoser.rulespec.model import SCOPES
    rows = [code(r[0])[0] for r in table(section("Records: what a condition sees"), "scope")]
    assert rows == list(SCOPES) == schema.RULE["properties"]["scope"]["enum"]


def test_case_key_error_shown_in_the_docs_is_what_rules_test_says_on_the_example(example_pack):
    """The example's cases with `slient:` for `silent:` fail as the docs show, before any case runs."""
    (shown,) = [b.strip() for b in re.findall(r"```text\n(.*?)```", section("Test cases"), re.S) if "unknown key" in b]
    cases = (example_pack / "team.test.yaml").read_text(encoding="utf-8")
    broken = cases.replace("    silent: [TEAM001]", "    slient: [TEAM001]")
    assert broken != cases
    (example_pack / "team.test.yaml").write_text(broken, encoding="utf-8")
    result = CliRunner().invoke(cli, ["rules", "test", "my_rules"])
    assert result.exit_code == 1 and result.output.strip() == shown, result.output


def test_rule_file_without_its_test_file_fails_as_the_docs_show(example_pack):
    (shown,) = [b.strip() for b in re.findall(r"```text\n(.*?)```", section("Test cases"), re.S) if "COVERAGE" in b]
    rule = (example_pack / "team.yaml").read_text(encoding="utf-8")
    (example_pack / "extra.yaml").write_text(rule.replace("TEAM001", "TEAM002").replace(
        "step-over-time-budget", "step-far-over-time-budget"), encoding="utf-8")
    result = CliRunner().invoke(cli, ["rules", "test", "my_rules"])
    assert result.exit_code == 1 and shown in result.output.splitlines(), result.output
    assert "2 passed, 1 failed" in result.output, result.output


def test_rules_test_on_the_example_test_file_runs_it_against_the_rule_file_beside_it(example_pack):
    result = CliRunner().invoke(cli, ["rules", "test", "my_rules/team.test.yaml"])
    assert result.exit_code == 0 and "2 passed, 0 failed" in result.output, result.output


def test_settings_examples_in_docs_and_docstrings_give_the_registered_defaults():
    """A `settings.register("NAME", DEFAULT, ...)` example naming a real setting shows its real
    default (docs/rules.md and diagnoser/settings.py once gave launch_gap_max_ns 50_000 for 100_000)."""
    from diagnoser import settings
    from diagnoser.catalogue import all_settings
    known = all_settings()
    shown = 0
    for where, text in (("docs/rules.md", TEXT), ("diagnoser/settings.py", settings.__doc__ or "")):
        for name, value in re.findall(r"settings\.register\(\s*\"([^\"]+)\",\s*([^,]+),", text):
            if name in known:
                shown += 1
                literal = value.strip().replace("_", "")
                assert literal == repr(known[name].default).replace("_", ""), \
                    f"{where}: {name} shown with default {value.strip()}, registered with {known[name].default}"
    assert shown >= 1
