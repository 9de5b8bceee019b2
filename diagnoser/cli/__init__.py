"""The `diagnose` command line: `diagnose FILE...` (here) plus the rules, facts, playbook and compare
subcommands (one module each beside this one); output.py writes reports, group.py is the click plumbing."""
from __future__ import annotations

import atexit
import contextlib
import gc
import logging
import os
import signal
import sys
import threading

import click

from .. import limits
from .._version import __version__
from ..dataclass_code import cached_dataclass_code
from ..regex_code import cached_regex_code
from ..errors import DiagnoserError
from ..report import DEFAULT_TOP
from ..text_safety import visible_line
from .compare import compare_cmd
from .facts import facts_cmd
from .group import DefaultGroup, MainCommand
from .output import output_format, write_output
from .playbook import playbook_cmd
from .rules import rules_group

FORMATS = ("md", "json", "html", "terminal", "junit")
EXIT_GATE = 3


@click.group(cls=DefaultGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="diagnose")
def cli():
    """diagnose: rule-based diagnosis of GPU performance from profiler output.

    \b
    diagnose report.ncu-rep                       Nsight Compute report (or its CSV export)
    diagnose run.sqlite trace.pt.trace.json.gz    Nsight Systems export and/or PyTorch trace
    diagnose snapshot.pickle                      CUDA memory snapshot after an OOM
    diagnose FILE -o report.html                  format from the extension (.md .json .html .xml)
    diagnose FILE --format json --fail-on warning the CI contract; exit 3 on a warning
    diagnose FILE -o diagnosis.xml                JUnit XML for CI test reports (docs/ci.md)

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
@click.option("--fail-on", type=click.Choice(["warning", "critical"]),
              help="Exit 3 if a finding at/above this severity exists (JUnit: those findings are the failures; default warning).")
@click.option("--progress/--no-progress", default=None, help="Progress on stderr (default: when stderr is a terminal).")
@click.option("--max-memory", help="Memory ceiling, e.g. 8G (default: physical memory or DIAGNOSER_MAX_MEMORY; 0: none).")
@click.option("--jobs", "-j", type=click.IntRange(min=0), default=0,
              help="Rank traces measured in parallel by this many local processes (default 0: one per core).")
@click.option("--scheduler", envvar="DIAGNOSER_SCHEDULER", metavar="ADDRESS",
              help="Measure rank traces on this Dask scheduler (tcp://HOST:8786; env DIAGNOSER_SCHEDULER).")
def run_cmd(files, fmt, output, top, min_severity, user_rules, params, set_items, fail_on, progress, max_memory,
            jobs, scheduler):
    with _no_collection():  # pandas, numpy and the pipeline: ~3,000 classes and functions, none of them garbage
        from .. import pipeline  # noqa: F401 (what every input needs)
        from ..api import diagnose  # the command is a thin layer over the library call (docs/api.md)
    if max_memory is not None:
        try:
            limits.apply_memory_limit(limits.parse_size(max_memory))
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--max-memory") from None
    from .. import settings
    from ..catalogue import all_settings

    if set_items:
        settings.parse_assignments(set_items, all_settings())  # a bad --set is an error before any input is read
    inputs = files + user_rules  # what -o may never name
    fmt = output_format(fmt, output, sys.stdout.isatty(), inputs=inputs)
    if progress is None:
        progress = sys.stderr.isatty()
    report = diagnose(files, user_rules, params, set_items, progress=progress, jobs=jobs, scheduler=scheduler)
    text = report.render(fmt, top=top, min_severity=min_severity, fail_on=fail_on)
    write_output(text, output, ansi=fmt == "terminal", inputs=inputs)
    if fail_on and report.failed(fail_on):
        sys.exit(EXIT_GATE)


for command in (rules_group, facts_cmd, playbook_cmd, compare_cmd):  # compare: issue 12
    cli.add_command(command)


@contextlib.contextmanager
def _no_collection():
    """The modules a run needs imported with the cyclic collector off, then frozen out of its reach
    (gc.freeze; main() unfreezes them when it returns to an in-process caller): every object an import
    makes lives to the end, yet the collections the imports trigger (~150) and the later ones of the
    run would each walk them again, ~0.05-0.1 s of CPU for nothing. Nothing is frozen for a caller
    that froze objects itself (main() could not give back only ours), nor outside main() (a click test
    runner invoking the command: nothing would unfreeze it)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if gc.get_freeze_count() == 0 and limits.process_owned():
            gc.freeze()
            gc.set_threshold(_RUN_GEN0, *gc.get_threshold()[1:])  # main() sets the caller's back
        if was:
            gc.enable()


# the youngest generation's threshold while a run's objects are frozen: at CPython's 700 allocations the run
# of host_sync collects ~27 times (4 of them the middle generation, which walks every survivor since), at
# 20,000 twice: the collections' CPU (those of the cli import included) ~0.020 -> ~0.015 s. The 126 MB corpus
# trace: ~0.021 -> ~0.010 s, peak RSS 122-123 -> 121-122 MiB (cycles of garbage are few: the reader's batches
# and the tables are freed by refcounting, not by the collector)
_RUN_GEN0 = 20_000


def _skip_exit_collection() -> None:
    """At interpreter exit every live object is moved out of the cyclic collector's reach (gc.freeze):
    the collections CPython runs while it tears the modules down walk pandas', numpy's and the report's
    objects for nothing (~0.15-0.2 s of CPU, as much as a small trace's analyses); refcounting still
    frees and closes everything, and the OS takes the memory back."""
    gc.freeze()


_BLAS_THREADS = "OPENBLAS_NUM_THREADS"


def _no_blas_workers() -> bool:
    """numpy's OpenBLAS starts a worker thread per core when numpy is imported, and they spin while they
    wait for work (~0.05 s of CPU per process on 2 cores, a tenth of `import pandas`); a diagnosis does no
    linear algebra large enough to be split among threads, so unless the user chose a count, numpy
    (imported later, here and in the rank workers, which inherit the setting) starts none. Returns
    whether it set the count, so that main() takes it back for an in-process caller."""
    if _BLAS_THREADS in os.environ or "numpy" in sys.modules:
        return False
    os.environ[_BLAS_THREADS] = "1"
    return True


def run() -> None:
    """The `diagnose` command's process (the console script and `python -m diagnoser.cli`): main(), then the exit.
    A finished run ends without the interpreter's teardown (every module's objects freed one by one: ~25 ms of a
    small trace's ~0.4 s of CPU, more than most of its analyses) once what an exit has to do is done: the atexit
    handlers (the finalizers of temporary folders among them) and the standard streams flushed. While another
    thread or a child process is alive, or where the interpreter lacks what this needs, the exit is its own."""
    try:
        main()
    except SystemExit as e:
        code = e.code
    else:
        code = 0
    if threading.active_count() > 1 or _has_children() or not hasattr(atexit, "_run_exitfuncs"):
        sys.exit(code)
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code & 0xFF
    else:  # as sys.exit shows one
        print(code, file=sys.stderr)
        status = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except BrokenPipeError:  # the reader left (`| head`): quietly, as while the report was written (group.py)
            pass
        except (OSError, ValueError):
            status = status or 120  # the interpreter's own status when the streams cannot be flushed at exit
    os._exit(status)


def _has_children() -> bool:
    """Whether a child process this one started (rank workers) is still running."""
    mp = sys.modules.get("multiprocessing")
    return mp is not None and bool(mp.active_children())


def main(argv=None):
    blas_set = _no_blas_workers()
    atexit.unregister(_skip_exit_collection)  # once, however often an in-process caller calls main
    atexit.register(_skip_exit_collection)  # runs at exit only: an in-process caller's collector is untouched until then
    frozen, thresholds = gc.get_freeze_count(), gc.get_threshold()
    previous_limit = limits.current_memory_limit()
    signals = [getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n)]
    previous_handlers = {s: signal.getsignal(s) for s in signals}
    try:
        # the run's dataclasses and regular expressions: their methods' and matchers' code cached
        with limits.owning_process(), cached_dataclass_code(), cached_regex_code():
            _main(argv)
    except limits.Terminated as e:  # a signal that lands while an error is being reported
        sys.exit(128 + e.signum)
    finally:  # an in-process caller gets its process back as it was
        try:
            _restore_signals(previous_handlers)  # first: a signal from here on gets the caller's handling
        except limits.Terminated as e:  # one that landed before they were back (the run is over: its exit status)
            _restore_signals(previous_handlers)
            sys.exit(128 + e.signum)
        finally:
            if blas_set:
                os.environ.pop(_BLAS_THREADS, None)
            if not frozen:
                gc.unfreeze()  # what _no_collection froze goes back to the collector's oldest generation
            gc.set_threshold(*thresholds)
            limits.restore_memory_limit(previous_limit)


def _restore_signals(handlers: dict) -> None:
    for signum, handler in handlers.items():
        try:
            signal.signal(signum, handler)
        except (ValueError, TypeError):  # not the main thread, or a handler set from C
            pass


def _main(argv=None):
    try:
        limits.exit_cleanly_on_signals()  # SIGTERM/SIGHUP unwind like SIGINT: temp files are removed
        # durable_rules logs a signal landing inside it with a traceback; it goes on up as an exception instead
        logging.getLogger("durable").addHandler(logging.NullHandler())
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
        click.echo(f"diagnose: error: {visible_line(e.format_message())} (see `{hint}`)", err=True)
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.message = visible_line(e.message)  # it may quote a file name from the command line
        e.show()
        sys.exit(e.exit_code)
    except DiagnoserError as e:
        click.echo(f"diagnose: error: {visible_line(e)}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        click.echo("diagnose: interrupted", err=True)
        sys.exit(130)
    except Exception as e:  # noqa: BLE001 - never a traceback for the user
        if os.environ.get("DIAGNOSER_DEBUG"):
            raise
        click.echo(f"diagnose: error: {type(e).__name__}: {visible_line(e)} (set DIAGNOSER_DEBUG=1 for a traceback)", err=True)
        sys.exit(1)

