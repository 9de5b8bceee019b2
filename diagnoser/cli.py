"""The `diagnose` command line: `diagnose FILE...` plus rules / facts / playbook subcommands."""
from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
from pathlib import Path

import click

from . import __version__, limits
from .errors import DiagnoserError

FORMATS = ("md", "json", "html", "terminal")
EXTENSION_FORMATS = {".md": "md", ".markdown": "md", ".json": "json", ".html": "html", ".htm": "html"}
SEVERITY_GATE = {"warning": ("warning", "critical"), "critical": ("critical",)}
EXIT_GATE = 3
DEFAULT_TOP = 10  # findings shown in full in a text report; the rest are summarized in one table


def output_format(fmt: str | None, output: str | None, stdout_is_tty: bool) -> str:
    """--format, else the -o file's extension, else `terminal` for a terminal and `md` for a pipe."""
    if fmt:
        return fmt
    if output and output != "-":
        return EXTENSION_FORMATS.get(Path(output).suffix.lower(), "md")
    return "terminal" if stdout_is_tty else "md"


def write_output(text: str, output: str | None, ansi: bool = False) -> None:
    """Write to stdout, or atomically to a file (temp file + rename: nothing half-written).
    `ansi`: the text is drawn for a terminal; keep its escape codes even when stdout is a pipe."""
    if not output or output == "-":
        click.echo(text, nl=False, color=True if ansi else None)
        return
    target = Path(output)
    if target.is_dir() or str(output).endswith(("/", os.sep)):
        raise DiagnoserError(f"-o {output}: is a directory; name a file, e.g. -o {Path(output) / 'report.md'}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=str(target.parent))
    except OSError as e:
        raise DiagnoserError(f"-o {output}: cannot write there ({e.strerror or e})") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a report is an ordinary file
        os.replace(tmp, target)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise DiagnoserError(f"-o {output}: cannot write there ({e.strerror or e})") from None
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class OneLineError(click.ClickException):
    """Shown as `diagnose: error: ...` on one line; exit code 1."""

    def show(self, file=None):
        click.echo(f"diagnose: error: {self.format_message()}", err=True)


class DefaultGroup(click.Group):
    """`diagnose FILE...` runs the diagnosis; known words are subcommands. Errors become one line."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except BrokenPipeError:  # `diagnose ... | head`: the reader left; stop quietly
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise click.exceptions.Exit(0) from None
        except DiagnoserError as e:
            raise OneLineError(str(e)) from None
        except MemoryError:
            raise OneLineError(f"out of memory ({limits.memory_limit_text()})") from None
        except Exception as e:  # noqa: BLE001 - never a traceback for the user
            if os.environ.get("DIAGNOSER_DEBUG"):
                raise
            raise OneLineError(f"{type(e).__name__}: {e} (set DIAGNOSER_DEBUG=1 for a traceback)") from None

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h", "--version"):
            first = args[0]
            if not first.startswith("-") and not os.path.exists(first) and not set("/.*?[") & set(first):
                import difflib
                close = difflib.get_close_matches(first, [c for c in self.commands if c != "run"], n=1)
                if close:
                    raise click.UsageError(f"no such file or command `{first}`; did you mean `diagnose {close[0]}`?", ctx)
            args = ["run"] + list(args)
        elif not args:
            args = ["--help"]
        return super().parse_args(ctx, args)

    def format_usage(self, ctx, formatter):
        formatter.write("Usage: diagnose [OPTIONS] FILE...\n       diagnose COMMAND [ARGS]...\n")

    def format_options(self, ctx, formatter):
        """The main command's options first (they are what `diagnose FILE` takes), then the commands."""
        main_cmd = self.commands["run"]
        with click.Context(main_cmd, info_name="diagnose", parent=None) as run_ctx:
            records = [p.get_help_record(run_ctx) for p in main_cmd.get_params(run_ctx)
                       if isinstance(p, click.Option) and "--help" not in p.opts]
        records += [p.get_help_record(ctx) for p in self.get_params(ctx)]
        with formatter.section("Options (diagnose FILE...)"):
            formatter.write_dl([r for r in records if r])
        self.format_commands(ctx, formatter)


class MainCommand(click.Command):
    """`diagnose FILE...`: its help is the top-level help (it has no name of its own to show)."""

    def get_help(self, ctx):
        root = ctx.find_root()
        return root.command.get_help(root)


@click.group(cls=DefaultGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="diagnose")
def cli():
    """diagnose: rule-based diagnosis of GPU performance from profiler output.

    \b
    diagnose report.ncu-rep                       Nsight Compute report (or its CSV export)
    diagnose run.sqlite trace.pt.trace.json.gz    Nsight Systems export and/or PyTorch trace
    diagnose snapshot.pickle                      CUDA memory snapshot after an OOM
    diagnose FILE -o report.html                  format from the extension (.md .json .html)
    diagnose FILE --format json --fail-on warning the CI contract; exit 3 on a warning

    Reads what the profilers wrote, measures facts, walks the YAML rule trees and prints a
    ranked diagnosis: what is wrong, the numbers that prove it, the gain, the fix, how to verify.
    In a terminal the report is rendered for it; piped, it is plain Markdown.
    """


@cli.command("run", hidden=True, cls=MainCommand)
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@click.option("--format", "fmt", type=click.Choice(FORMATS),
              help="Report format (default: from the -o extension; `terminal` on a terminal, else `md`).")
@click.option("-o", "--output", metavar="FILE", help="Write the report to FILE (atomically; `-` is stdout).")
@click.option("--top", type=click.IntRange(min=1), metavar="N",
              help=f"Show the first N findings in full, the rest in one table (default {DEFAULT_TOP}; JSON: all).")
@click.option("--min-severity", type=click.Choice(["info", "warning", "critical"]), default="info",
              help="Leave out findings below this severity (default: info, all).")
@click.option("--rules", "user_rules", multiple=True, metavar="PATH", help="Extra rule file or folder (repeatable).")
@click.option("--param", "params", multiple=True, metavar="RULE.NAME=V", help="Override a rule threshold (repeatable).")
@click.option("--set", "set_items", multiple=True, metavar="NAME=V",
              help="Override an analysis setting (repeatable; `diagnose facts --catalogue` lists them).")
@click.option("--fail-on", type=click.Choice(["warning", "critical"]), help="Exit 3 if a finding at/above this severity exists.")
@click.option("--progress/--no-progress", default=None, help="Progress on stderr (default: when stderr is a terminal).")
@click.option("--max-memory", help="Memory ceiling, e.g. 8G (default: physical memory or DIAGNOSER_MAX_MEMORY; 0: none).")
@click.option("--jobs", "-j", type=click.IntRange(min=0), default=0,
              help="Rank traces measured in parallel by this many local processes (default 0: one per core).")
@click.option("--scheduler", envvar="DIAGNOSER_SCHEDULER", metavar="ADDRESS",
              help="Measure rank traces on this Dask scheduler (tcp://HOST:8786; env DIAGNOSER_SCHEDULER).")
def run_cmd(files, fmt, output, top, min_severity, user_rules, params, set_items, fail_on, progress, max_memory,
            jobs, scheduler):
    from .distributed import executing
    from .pipeline import diagnose
    if max_memory is not None:
        try:
            limits.apply_memory_limit(limits.parse_size(max_memory))
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--max-memory") from None
    from . import settings
    from .report.render import render_report

    set_values = settings.parse_assignments(set_items) if set_items else {}
    fmt = output_format(fmt, output, sys.stdout.isatty())
    if progress is None:
        progress = sys.stderr.isatty()
    with executing(jobs, scheduler):
        report = diagnose(files, user_rules, params, progress=progress, set_values=set_values)
    if top is None and fmt in ("md", "terminal"):
        top = DEFAULT_TOP
    text = render_report(report, fmt, top=top, min_severity=min_severity)
    write_output(text, output, ansi=fmt == "terminal")
    if fail_on and any(f.severity in SEVERITY_GATE[fail_on] for f in report.findings):
        sys.exit(EXIT_GATE)


@cli.group("rules")
def rules_group():
    """List, show, validate and test rules."""


def _pack(user_rules=(), params=()):
    from .pipeline import load_pack
    return load_pack(user_rules, params)


@rules_group.command("list")
@click.option("--rules", "user_rules", multiple=True, help="Extra rule file or folder.")
def rules_list(user_rules):
    """Every rule in force: id, severity, category, tree and title."""
    for r in _pack(user_rules).ordered():
        origin = "" if r.shipped else f"  [{r.path}]"
        click.echo(f"{r.id:<10} {r.severity:<8} {r.category:<24} {r.tree:<15} {r.title}{origin}")


@rules_group.command("show")
@click.argument("rule_id")
@click.option("--rules", "user_rules", multiple=True)
def rules_show(rule_id, user_rules):
    """One rule in full (as compiled, params resolved)."""
    from .rulespec.compile import compile_rule
    pack = _pack(user_rules)
    if rule_id not in pack.rules:
        raise DiagnoserError(f"no rule {rule_id}; `diagnose rules list` shows them")
    r = pack.rules[rule_id]
    click.echo(f"{r.id} {r.name}\n  {r.title}\n  file: {r.path}:{r.line}")
    click.echo(f"  tree: {r.tree}  category: {r.category}  severity: {r.severity}  status: {r.status}  scope: {r.scope}")
    click.echo(f"  requires: {', '.join(r.requires) or '-'}")
    click.echo(f"  needs (requires + every fact `when` reads; absent -> not evaluated): {', '.join(r.needs()) or '-'}")
    click.echo(f"  params: {json.dumps(r.params, sort_keys=True)}")
    if r.extra.get("conditions"):
        click.echo(f"  shared conditions (their params are tuned where they are defined): {', '.join(r.extra['conditions'])}")
    click.echo(f"  when (compiled): {json.dumps(compile_rule(r).predicate)}")
    click.echo(f"  message: {r.message}\n  estimated_gain: {r.estimated_gain} of {r.gain_of}")
    click.echo(f"  fix: {r.fix}\n  verify: {r.verify}")
    if r.verify_check:  # the Verify step as `diagnose compare` checks it (issue 12)
        click.echo("  verify_check: " + "; ".join(f"{c.fact} {c.op}" + (f" {c.param}={r.params.get(c.param)}" if c.param else
                                                   "" if c.value is None else f" {c.value}") for c in r.verify_check))


@rules_group.command("validate")
@click.argument("paths", nargs=-1, required=True)
def rules_validate(paths):
    """Validate rule files; exit 1 on the first error (file:line: what to fix)."""
    from .catalogue import catalogue
    from .rulespec.loader import build_pack
    from .resources import rules_dir
    pack = build_pack(rules_dir(), [Path(p) for p in paths], known_facts=catalogue())
    from .errors import RuleError
    for r in pack.ordered():  # shipped rules must say how compare checks their Verify step
        if (r.shipped or Path(r.path).resolve().parent == Path(rules_dir()).resolve()) and not r.verify_check:
            raise RuleError(Path(r.path), r.line or None, f"rule {r.id}: missing `verify_check`; add its Verify step as "
                            "conditions on the re-profiled run, e.g. [{fact: idle_data_pct, op: lt, param: min_idle_data_pct}]")
    n = sum(1 for r in pack.rules.values() if not r.shipped or any(Path(p).resolve() in (Path(r.path).resolve(), Path(r.path).resolve().parent) for p in paths))
    click.echo(f"ok: {n} rule(s) valid in {', '.join(paths)}")


@rules_group.command("test")
@click.argument("paths", nargs=-1, required=True)
@click.option("--rules", "user_rules", multiple=True)
def rules_test(paths, user_rules):
    """Run NAME.test.yaml cases beside rule files; fail rules lacking a firing and a silent case."""
    from .catalogue import catalogue
    from .rulespec.testing import run_tests
    extra = list(user_rules) + [p for p in paths if not str(p).endswith(".test.yaml")]
    pack = _pack(extra)
    results, coverage, synthetic_only = run_tests([Path(p) for p in paths], pack, catalogue())
    failed = [r for r in results if not r.ok]
    skipped = [r for r in results if r.skipped]
    for r in results:
        status = "SKIP" if r.skipped else ("PASS" if r.ok else "FAIL")
        click.echo(f"{status}  {Path(r.file).name}: {r.name}{'  (' + r.skipped + ')' if r.skipped else ''}")
        for p in r.problems:
            click.echo(f"      {p}")
    for c in coverage:
        click.echo(f"COVERAGE  {c}")
    if synthetic_only:
        click.echo(f"note: fire only in synthetic cases (no real trace yet): {', '.join(synthetic_only)}")
    click.echo(f"{len(results) - len(failed) - len(skipped)} passed, {len(failed) + len(coverage)} failed"
               + (f", {len(skipped)} skipped" if skipped else ""))
    if failed or coverage:
        sys.exit(1)


@cli.command("facts", short_help="The measured facts of FILE(s), or the facts and settings catalogue.")
@click.argument("files", nargs=-1, metavar="FILE...")
@click.option("--catalogue", "show_catalogue", is_flag=True,
              help="List every fact the readers can produce, and the analysis settings.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def facts_cmd(files, show_catalogue, fmt):
    """Print the facts measured from FILE(s), one block per input (or per run of several ranks), or the
    facts catalogue and the analysis settings (`--set NAME=VALUE`)."""
    if show_catalogue:
        from .catalogue import catalogue
        from .settings import all_settings
        specs = list(catalogue().values())
        known = list(all_settings().values())
        if fmt == "json":
            click.echo(json.dumps({"facts": [s.__dict__ | {"sources": list(s.sources)} for s in specs],
                                   "settings": [s.to_json() for s in known]}, indent=2))
            return
        for s in specs:
            click.echo(f"{s.name:<40} {s.type:<7} {s.unit:<8} {s.subject:<7} {s.meaning}")
        click.echo("\nAnalysis settings (override with --set NAME=VALUE, or `settings:` in a rule pack):")
        for s in known:
            click.echo(f"{s.name:<40} {s.default!s:<10} {s.unit:<6} {s.meaning}")
        return
    if not files:
        raise DiagnoserError("give FILE(s), or --catalogue")
    from .inputs import display_kind
    from .pipeline import analyse, load_groups
    blocks = []
    for group in load_groups(files):
        result = analyse(group)
        blocks.append((result.inputs, result.facts))
    if fmt == "json":
        out = {"inputs": [i for inputs, _ in blocks for i in inputs], "facts": [
            {"name": f.name, "value": f.value, "unit": f.unit, "source": f.source,
             "subject": f.subject.to_json() if f.subject else None,
             "inputs": [i["path"] for i in inputs]} for inputs, facts in blocks for f in facts]}
        click.echo(json.dumps(out, indent=2, ensure_ascii=False))
        return
    for n, (inputs, facts) in enumerate(blocks):
        kinds = sorted({display_kind(i["kind"]) for i in inputs})
        what = f"{len(inputs)} ranks, " if len(inputs) > 1 else ""
        click.echo(("\n" if n else "") + f"== {', '.join(i['path'] for i in inputs)} ({what}{', '.join(kinds)}): "
                   f"{len(facts)} facts")
        for f in facts:
            subj = f"{f.subject.kind} {f.subject.id}" if f.subject else "run"
            click.echo(f"{subj:<14} {f.name:<40} {f.value!s:<22} {f.unit}")


@cli.command("playbook", short_help="One rule's remediation playbook, or the whole handbook as HTML.")
@click.argument("rule_id", required=False, metavar="[RULE]")
@click.option("--rules", "user_rules", multiple=True, help="Extra rule file or folder.")
@click.option("-o", "--output", help="Write here (atomically).")
def playbook_cmd(rule_id, user_rules, output):
    """The remediation handbook: one rule's playbook section (`diagnose playbook TRAIN002`, Markdown),
    or, without RULE, every rule's (shipped and custom) as one HTML file."""
    pack = _pack(user_rules)
    if rule_id:
        from .report.playbook import rule_playbook_markdown
        rid = rule_id.upper()
        if rid not in pack.rules:
            raise DiagnoserError(f"no rule {rule_id}; `diagnose rules list` shows them")
        text = rule_playbook_markdown(pack, rid)
        if not output and sys.stdout.isatty():
            from .report.terminal import render_markdown_text
            text = render_markdown_text(text)
            write_output(text, output, ansi=True)
            return
        write_output(text, output)
        return
    from .report.playbook import render_playbook_html
    write_output(render_playbook_html(pack), output)


from .compare.cli import compare_cmd  # noqa: E402  (issue 12: diagnose compare BEFORE... --to AFTER)

cli.add_command(compare_cmd)


def main(argv=None):
    previous_limit = limits.current_memory_limit()
    signals = [getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n)]
    previous_handlers = {s: signal.getsignal(s) for s in signals}
    try:
        _main(argv)
    except limits.Terminated as e:  # a signal that lands while an error is being reported
        sys.exit(128 + e.signum)
    finally:  # an in-process caller gets its process back as it was
        limits.restore_memory_limit(previous_limit)
        for signum, handler in previous_handlers.items():
            try:
                signal.signal(signum, handler)
            except (ValueError, TypeError):  # not the main thread, or a handler set from C
                pass


def _main(argv=None):
    try:
        limits.exit_cleanly_on_signals()  # SIGTERM/SIGHUP unwind like SIGINT: temp files are removed
        limits.apply_memory_limit(limits.default_limit())
        cli.main(args=argv, prog_name="diagnose", standalone_mode=False)
    except limits.Terminated as e:
        click.echo("diagnose: terminated", err=True)
        sys.exit(128 + e.signum)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.Abort:
        click.echo("diagnose: aborted", err=True)
        sys.exit(130)
    except click.UsageError as e:  # one line, naming the command the user typed (never the hidden `run`)
        hint = "diagnose --help"
        if e.ctx is not None and e.ctx.command.name not in ("run", None) and e.ctx.parent is not None:
            hint = f"{e.ctx.command_path} --help"
        click.echo(f"diagnose: error: {e.format_message()} (see `{hint}`)", err=True)
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except DiagnoserError as e:
        click.echo(f"diagnose: error: {e}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        click.echo("diagnose: interrupted", err=True)
        sys.exit(130)
    except Exception as e:  # noqa: BLE001 - never a traceback for the user
        if os.environ.get("DIAGNOSER_DEBUG"):
            raise
        click.echo(f"diagnose: error: {type(e).__name__}: {e} (set DIAGNOSER_DEBUG=1 for a traceback)", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
