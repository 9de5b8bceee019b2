"""The command's process ends as an exit must (cli.run: the console script and `python -m diagnoser.cli`): the
report whole on stdout, the exit status of the run, every atexit handler run (a temporary folder's finalizer among
them), and, while another thread is still working, the interpreter's own exit that waits for it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = str(ROOT / "fixtures/torch/host_sync.pt.trace.json.gz")
# the command as the console script runs it, after a caller's setup: an atexit handler, a temporary folder left
# for its finalizer, and (with "thread") a thread that is still working when the run ends
PROBE = """
import atexit, sys, tempfile, threading, time
marker, mode = sys.argv.pop(1), sys.argv.pop(1)
atexit.register(lambda: open(marker, "a").write("atexit\\n"))
kept = tempfile.TemporaryDirectory(prefix="diagnoser-exit-test-")
open(marker, "a").write("tmp " + kept.name + "\\n")
if mode == "thread":
    threading.Thread(target=lambda: (time.sleep(1.5), open(marker, "a").write("thread\\n"))).start()
from diagnoser.cli import run
run()
"""


def _run(tmp_path, mode, *args):
    marker = tmp_path / f"marker-{mode}-{len(list(tmp_path.iterdir()))}"
    env = dict(os.environ, PYTHONPATH=str(ROOT), DIAGNOSER_CACHE_DIR=str(tmp_path / "cache"))
    got = subprocess.run([sys.executable, "-c", PROBE, str(marker), mode, *args], env=env, capture_output=True,
                         timeout=120)
    lines = marker.read_text().splitlines() if marker.exists() else []
    return got, lines


def test_a_run_ends_with_its_report_its_status_and_every_exit_handler(tmp_path):
    plain = subprocess.run([sys.executable, "-c", "import sys; from diagnoser.cli import main; main(sys.argv[1:])",
                            TRACE, "--format", "json"], env=dict(os.environ, PYTHONPATH=str(ROOT),
                                                                  DIAGNOSER_CACHE_DIR=str(tmp_path / "cache")),
                           capture_output=True, timeout=120)
    for args, status in (((TRACE, "--format", "json"), 0), ((TRACE, "--fail-on", "warning", "--format", "json"), 3),
                         ((str(ROOT / "README.md"),), 1), (("--no-such-option",), 2)):
        got, lines = _run(tmp_path, "plain", *args)
        assert got.returncode == status, (args, got.stderr[-500:])
        assert lines[-1] == "atexit", lines  # the caller's handler ran, after the run
        kept = Path(lines[0].split(" ", 1)[1])
        assert not kept.exists(), "a temporary folder left to its finalizer is removed at exit"
        if status in (0, 3):
            assert got.stdout == plain.stdout  # the whole report (JSON: the same bytes as main() writes)
        else:
            assert got.stderr.decode().startswith("diagnose: error") and got.stderr.count(b"\n") == 1


def test_a_thread_still_working_at_the_end_is_waited_for(tmp_path):
    got, lines = _run(tmp_path, "thread", TRACE, "--format", "json")
    assert got.returncode == 0, got.stderr[-500:]
    assert "thread" in lines and lines[-1] == "atexit", lines


def test_the_report_reaches_a_pipe_whole(tmp_path):
    out = tmp_path / "r.html"
    env = dict(os.environ, PYTHONPATH=str(ROOT), DIAGNOSER_CACHE_DIR=str(tmp_path / "cache"))
    written = subprocess.run([sys.executable, "-m", "diagnoser.cli", TRACE, "-o", str(out)], env=env,
                             capture_output=True, timeout=120)
    piped = subprocess.run([sys.executable, "-m", "diagnoser.cli", TRACE, "--format", "html"], env=env,
                           capture_output=True, timeout=120)
    assert written.returncode == piped.returncode == 0
    assert piped.stdout == out.read_bytes() and len(piped.stdout) > 50_000
