"""`diagnose rules list | show | validate | test`: the rules in force, one in full, rule files checked
against the schema and the facts catalogue, and their test cases run."""
from __future__ import annotations

import json
import shutil
import sys
import textwrap
from pathlib import Path

import click

from ..errors import DiagnoserError
from ..text_safety import visible_line, visible_text


@click.group("rules")
def rules_group():
    """List, show, validate and test rules."""


def pack_of(user_rules=(), params=()):
    """The rules in force: shipped plus `--rules` packs, `--param` applied."""
    from ..pipeline import load_pack
    return load_pack(user_rules, params)


@rules_group.command("list")
@click.option("--rules", "user_rules", multiple=True, help="Extra rule file or folder.")
def rules_list(user_rules):
    """Every rule in force: id, severity, category, tree and title."""
    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
    for line in rules_list_lines(pack_of(user_rules).ordered(), width):
        click.echo(line)


def rules_list_lines(rules, width: int | None = None) -> list[str]:
    """One line per rule; on a terminal `width` wide the title wraps between words under itself
    (piped, each rule stays on one line for grep)."""
    out = []
    for r in rules:
        origin = "" if r.shipped else f"  [{r.path}]"
        head = f"{r.id:<10} {r.severity:<8} {r.category:<24} {r.tree:<15} "
        text = f"{r.title}{origin}"
        if width is None or len(head) + len(text) <= width:
            out.append(head + text)
        elif width - len(head) >= 20:
            out += textwrap.wrap(text, width, initial_indent=head, subsequent_indent=" " * len(head),
                                 break_long_words=False, break_on_hyphens=False)
        else:  # too narrow for the columns: the title on the lines below
            out += [head.rstrip()] + textwrap.wrap(text, width, initial_indent="    ", subsequent_indent="    ",
                                                   break_long_words=False, break_on_hyphens=False)
    return out


def unknown_rule(rule_id: str, user_rules=(), command: str = "diagnose playbook") -> DiagnoserError:
    """No rule `rule_id` in force: where to look (a rule of one's own needs its file passed with --rules)."""
    if user_rules:
        return DiagnoserError(f"no rule {rule_id} in the shipped rules or {', '.join(user_rules)}; "
                              f"`diagnose rules list --rules {user_rules[0]}` shows them")
    return DiagnoserError(f"no rule {rule_id} among the shipped rules; for a rule of your own, name its file or "
                          f"folder: `{command} {rule_id} --rules PATH` (`diagnose rules list` shows the shipped ones)")


def _text(value) -> str:
    """A rule field as text: a list (refs) one item after another, never a Python tuple."""
    return ", ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


@rules_group.command("show")
@click.argument("rule_id")
@click.option("--rules", "user_rules", multiple=True)
def rules_show(rule_id, user_rules):
    """One rule in full (as compiled, params resolved)."""
    from ..rulespec.compile import compile_rule
    pack = pack_of(user_rules)
    if rule_id not in pack.rules:
        raise unknown_rule(rule_id, user_rules, "diagnose rules show")
    r = pack.rules[rule_id]
    click.echo(f"{r.id} {r.name}\n  {r.title}\n  file: {visible_line(r.path)}:{r.line}")
    click.echo(f"  tree: {r.tree}  category: {r.category}  severity: {r.severity}  status: {r.status}  scope: {r.scope}")
    click.echo(f"  requires: {', '.join(r.requires) or '-'}")
    click.echo(f"  needs (requires + every fact `when` reads; absent -> not evaluated): {', '.join(r.needs()) or '-'}")
    click.echo(f"  params: {json.dumps(r.params, sort_keys=True)}")
    if r.extra.get("conditions"):
        click.echo(f"  shared conditions (their params are tuned where they are defined): {', '.join(r.extra['conditions'])}")
    if r.extra.get("pack_params"):  # thresholds declared once for the pack (docs/rules.md, Pack params)
        click.echo("  pack params (declared once for the pack): " + ", ".join(f"{k} from {where}" for k, where in r.extra["pack_params"].items()))
    click.echo(f"  when (compiled): {json.dumps(compile_rule(r).predicate)}")
    click.echo(f"  message: {r.message}\n  estimated_gain: {r.estimated_gain} of {r.gain_of}")
    click.echo(f"  fix: {r.fix}\n  verify: {r.verify}")
    for v in r.variants:  # texts for some programs (docs/rules.md, Text variants), first match per field
        sel = ", ".join(f"{fact}: {'|'.join(allowed)}" for fact, allowed in v.select)
        click.echo(f"  variant for {sel}:" + "".join(f"\n    {k}: {_text(getattr(v, k))}" for k in ("title", "message", "fix", "verify", "refs")
                                                     if getattr(v, k) is not None))
    if r.verify_check:  # the Verify step as `diagnose compare` checks it (issue 12)
        click.echo("  verify_check: " + "; ".join(f"{c.fact} {c.op}" + (f" {c.param}={r.params.get(c.param)}" if c.param else
                                                   "" if c.value is None else f" {c.value}") for c in r.verify_check))


@rules_group.command("validate")
@click.argument("paths", nargs=-1, required=True)
def rules_validate(paths):
    """Validate rule files; exit 1 on the first error (file:line: what to fix)."""
    from ..catalogue import all_settings, catalogue
    from ..rulespec.loader import build_pack
    from ..resources import rules_dir
    pack = build_pack(rules_dir(), [Path(p) for p in paths], known_facts=catalogue(), known_settings=all_settings)
    from ..errors import RuleError
    for r in pack.ordered():  # shipped rules must say how compare checks their Verify step
        if (r.shipped or Path(r.path).resolve().parent == Path(rules_dir()).resolve()) and not r.verify_check:
            raise RuleError(Path(r.path), r.line or None, f"rule {r.id}: missing `verify_check`; add its Verify step as "
                            "conditions on the re-profiled run, e.g. [{fact: idle_data_pct, op: lt, param: min_idle_data_pct}]")
    n = sum(1 for r in pack.rules.values() if not r.shipped or any(Path(p).resolve() in (Path(r.path).resolve(), Path(r.path).resolve().parent) for p in paths))
    click.echo(f"ok: {n} rule(s) valid in {', '.join(map(visible_line, paths))}")


@rules_group.command("test")
@click.argument("paths", nargs=-1, required=True)
@click.option("--rules", "user_rules", multiple=True)
def rules_test(paths, user_rules):
    """Run NAME.test.yaml cases beside rule files; fail rules lacking a firing and a silent case."""
    from ..catalogue import catalogue
    from .rule_tests import rule_files_under_test, run_tests
    extra = list(user_rules) + [str(p) for p in rule_files_under_test(paths)]  # a test file: NAME.yaml beside it
    pack = pack_of(extra)
    run = run_tests([Path(p) for p in paths], pack, catalogue())
    results, coverage, synthetic_only = run.results, run.coverage, run.synthetic_only
    failed = [r for r in results if not r.ok]
    skipped = [r for r in results if r.skipped]
    for r in results:
        status = "SKIP" if r.skipped else ("PASS" if r.ok else "FAIL")
        click.echo(visible_line(f"{status}  {Path(r.file).name}: {r.name}{'  (' + r.skipped + ')' if r.skipped else ''}"))
        for p in r.problems:  # a case's file names and what its trace holds: shown, never acted on
            click.echo(f"      {visible_text(p)}")
    for c in coverage:
        click.echo(f"COVERAGE  {c}")
    for c in run.unchecked:
        click.echo(f"SKIP  coverage: {c}")
    if synthetic_only:
        click.echo(f"note: fire only in synthetic cases (no real trace yet): {', '.join(synthetic_only)}")
    click.echo(f"{len(results) - len(failed) - len(skipped)} passed, {len(failed) + len(coverage)} failed"
               + (f", {len(skipped)} skipped" if skipped else ""))
    if failed or coverage:
        sys.exit(1)
