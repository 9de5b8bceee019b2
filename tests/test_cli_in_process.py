"""Running the CLI in-process (tests, notebooks) leaves the caller's process as it was: the
address-space ceiling and the signal handlers main() installs for its own run are restored."""
from __future__ import annotations

import resource
import signal

from diagnoser import cli


def test_main_in_process_restores_the_memory_limit_and_signal_handlers(fixtures_dir):
    before_limit = resource.getrlimit(resource.RLIMIT_AS)
    before_term = signal.getsignal(signal.SIGTERM)
    try:
        cli.main([str(fixtures_dir / "torch" / "host_sync.pt.trace.json.gz"), "--format", "json", "-o", "/dev/null"])
    except SystemExit as e:
        assert e.code in (0, None)
    assert resource.getrlimit(resource.RLIMIT_AS) == before_limit
    assert signal.getsignal(signal.SIGTERM) == before_term


def test_a_sigterm_landing_as_main_gives_the_process_back_exits_143_without_a_traceback(fixtures_dir, monkeypatch):
    # found by benchmarks/fuzz.py (seed 36, a killed case): the run over, SIGTERM landed while main() was putting
    # the caller's handlers back, and its Terminated left main() as a traceback. Here it lands at the first restore.
    from diagnoser import limits
    before_term = signal.getsignal(signal.SIGTERM)
    real, calls = cli._restore_signals, []

    def restore(handlers):
        calls.append(1)
        if len(calls) == 1:
            raise limits.Terminated(signal.SIGTERM)
        real(handlers)
    monkeypatch.setattr(cli, "_restore_signals", restore)
    try:
        cli.main([str(fixtures_dir / "torch" / "host_sync.pt.trace.json.gz"), "--format", "json", "-o", "/dev/null"])
    except SystemExit as e:
        assert e.code == 128 + signal.SIGTERM
    else:
        raise AssertionError("no exit status")
    assert len(calls) == 2
    assert signal.getsignal(signal.SIGTERM) == before_term


def test_main_in_process_gives_the_cyclic_collector_back_as_it_was(fixtures_dir):
    """main() imports a run's modules with the collector off and freezes them (start-up CPU); an
    in-process caller gets the collector back enabled and nothing left frozen, each call, with its own
    thresholds (the run collects its youngest generation less often: cli._RUN_GEN0)."""
    import gc
    assert gc.isenabled() and gc.get_freeze_count() == 0
    thresholds = gc.get_threshold()
    assert thresholds[0] != cli._RUN_GEN0
    for _ in range(2):
        try:
            cli.main([str(fixtures_dir / "torch" / "host_sync.pt.trace.json.gz"), "--format", "json", "-o", "/dev/null"])
        except SystemExit as e:
            assert e.code in (0, None)
        assert gc.isenabled()
        assert gc.get_freeze_count() == 0
        assert gc.get_threshold() == thresholds
    gc.disable()  # a caller that turned it off keeps it off
    try:
        try:
            cli.main([str(fixtures_dir / "torch" / "host_sync.pt.trace.json.gz"), "--format", "json", "-o", "/dev/null"])
        except SystemExit as e:
            assert e.code in (0, None)
        assert not gc.isenabled()
        assert gc.get_freeze_count() == 0
    finally:
        gc.enable()


def test_the_command_freezes_every_object_at_exit_once(fixtures_dir):
    """At exit (the atexit handler main() registers, once however often it runs) every object is frozen,
    so the interpreter's teardown collections skip them; the reports are written all the same."""
    import os
    import subprocess
    import sys
    code = ("import atexit, gc, sys\nfrom diagnoser import cli\n"
            "ran = []\nfreeze = cli._skip_exit_collection\n"
            "cli._skip_exit_collection = lambda: (ran.append(1), freeze())\n"
            "for _ in range(2):\n"
            "    try:\n        cli.main(sys.argv[1:])\n    except SystemExit:\n        pass\n"
            "print('before', gc.get_freeze_count(), file=sys.stderr)\n"
            "atexit._run_exitfuncs()\n"
            "print('after', len(ran), gc.get_freeze_count() > 0, file=sys.stderr)\n")
    trace = str(fixtures_dir / "torch" / "host_sync.pt.trace.json.gz")
    got = subprocess.run([sys.executable, "-c", code, trace, "--format", "json"], capture_output=True, text=True,
                         env=dict(os.environ), timeout=300)
    assert got.stdout.count('"findings"') == 2  # both reports written whole
    before, after = got.stderr.strip().splitlines()[-2:]
    assert before == "before 0"  # nothing frozen while the process runs (main unfreezes what it froze)
    assert after == "after 1 True"  # the handler ran once, and froze


def test_the_command_run_outside_main_freezes_nothing(fixtures_dir):
    """A click test runner invokes the command without main(): nothing would unfreeze what the import
    step froze, so it freezes nothing (the whole suite ran such tests before the one above and failed)."""
    import gc

    from click.testing import CliRunner
    assert gc.get_freeze_count() == 0
    result = CliRunner().invoke(cli.cli, [str(fixtures_dir / "torch" / "host_sync.pt.trace.json.gz"),
                                          "--format", "json", "-o", "/dev/null"])
    assert result.exit_code == 0, result.output
    assert gc.get_freeze_count() == 0
    assert gc.isenabled()


def test_the_command_starts_no_blas_worker_threads_unless_the_user_chose_a_count(fixtures_dir):
    """numpy's OpenBLAS starts a spinning worker per core at import (start-up CPU): the command, which does
    no linear algebra worth splitting, has it start none; a count the user set stays theirs; an
    in-process caller gets its environment back."""
    import os
    import subprocess
    import sys

    import pytest
    if not os.path.isdir("/proc/self/task"):
        pytest.skip("counts threads through Linux's /proc")
    code = ("import os, sys\nfrom diagnoser import cli\n"
            "try:\n    cli.main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "print('numpy' in sys.modules, len(os.listdir('/proc/self/task')), os.environ.get('OPENBLAS_NUM_THREADS'), "
            "file=sys.stderr)\n")
    trace = str(fixtures_dir / "torch" / "host_sync.pt.trace.json.gz")

    def run(**env):
        base = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
        got = subprocess.run([sys.executable, "-c", code, trace, "--format", "json"], capture_output=True, text=True,
                             env=dict(base, **env), timeout=300)
        assert got.stdout.count('"findings"') == 1, got.stderr[-2000:]
        return got.stderr.strip().splitlines()[-1]

    assert run() == "True 1 None"  # numpy loaded, one thread (the main one), the variable unset again
    if (os.cpu_count() or 1) >= 2:
        assert run(OPENBLAS_NUM_THREADS="2") == "True 2 2"


def test_the_command_collects_its_youngest_generation_less_often_while_it_runs(fixtures_dir):
    """Once the run's modules are imported and frozen, the command's own process collects the youngest
    generation every cli._RUN_GEN0 allocations, not CPython's 700 (start-up CPU; peak RSS unchanged on
    the 126 MB corpus trace); the report is written all the same."""
    import os
    import subprocess
    import sys
    code = ("import gc, sys\nfrom diagnoser import cli\nwrite = cli.write_output\n"
            "def probe(*a, **k):\n    sys.stderr.write(f'T {gc.get_threshold()[0]} {gc.isenabled()}\\n')\n"
            "    return write(*a, **k)\n"
            "cli.write_output = probe\n"
            "try:\n    cli.main(sys.argv[1:])\nexcept SystemExit:\n    pass\n")
    trace = str(fixtures_dir / "torch" / "host_sync.pt.trace.json.gz")
    got = subprocess.run([sys.executable, "-c", code, trace, "--format", "json"], capture_output=True, text=True,
                         env=dict(os.environ), timeout=300)
    assert got.stdout.count('"findings"') == 1
    from diagnoser import cli
    assert [line for line in got.stderr.splitlines() if line.startswith("T ")] == [f"T {cli._RUN_GEN0} True"]
