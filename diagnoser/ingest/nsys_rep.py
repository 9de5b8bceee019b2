"""Nsight Systems report (`.nsys-rep`) -> Timeline, through NVIDIA's own SQLite export.

The .nsys-rep format is proprietary: only `nsys` reads it. When `nsys` is on PATH we run
`nsys export --type sqlite` into a temporary folder (never beside the input) and read the result
with the SQLite reader; otherwise the error tells the user the exact command to run.
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from ..errors import InputError
from ..limits import process_owned
from .expansion import export_beside
from .input_files import gunzip_to, is_gzip
from ..text_safety import shell_word
from ..timeline.tables import Timeline
from .nsys_sqlite import read_nsys_sqlite

EXPORT_TIMEOUT_S = 3600


REPORT_EXTENSIONS = (".nsys-rep", ".qdrep")


def report_kind(path) -> str:
    """How the report is named to the user: `.qdrep` is the pre-2021.4 Nsight Systems format."""
    name = Path(path).name.removesuffix(".gz")
    if name.endswith(".qdrep"):
        return "an old Nsight Systems report (.qdrep, Nsight Systems before 2021.4)"
    return "an Nsight Systems report (.nsys-rep)"


def _path_word(path: Path) -> str:
    """`path` as one shell argument that pastes as given: its folder kept, and `./` before a name
    that starts with `-` (else the command reads it as an option)."""
    text = str(path)
    return shell_word(f"./{text}" if text.startswith("-") else text)


def export_command(path) -> str:
    """The command a user runs to turn `path` into an SQLite export beside it (pasted where the
    user ran diagnose: the paths keep their folder)."""
    p = Path(path)
    name = p.name
    if name.endswith(".gz"):
        return f"gunzip -k {_path_word(p)} && {export_command(p.with_name(name[:-3]))}"
    stem = next((name[:-len(ext)] for ext in REPORT_EXTENSIONS if name.endswith(ext)), p.stem)
    return f"nsys export --type sqlite -o {_path_word(p.with_name(stem + '.sqlite'))} {_path_word(p)}"


def read_nsys_rep(path, progress: bool = False) -> Timeline:
    """Convert an .nsys-rep (plain or gzipped) with `nsys export` and read the SQLite it writes."""
    p = Path(path)
    if not p.exists():
        raise InputError(p, "no such file")
    nsys = shutil.which("nsys")
    beside = export_beside(str(p))
    if nsys is None and beside is not None:
        raise InputError(p, f"{report_kind(p)} can only be read through NVIDIA's `nsys`, which is not on PATH; "
                            f"its SQLite export is beside it: pass {_path_word(Path(beside))} instead "
                            "(a folder holding both reads the export)")
    if nsys is None:
        raise InputError(p, f"{report_kind(p)} can only be read through NVIDIA's "
                            f"`nsys`, which is not on PATH; convert it with `{export_command(p)}` "
                            "and pass the .sqlite file")
    with tempfile.TemporaryDirectory(prefix="diagnoser-nsys-rep-") as tmp:
        report = _plain_report(p, Path(tmp))
        out = Path(tmp) / "export.sqlite"
        cmd = [nsys, "export", "--type", "sqlite", "-o", str(out), str(report)]
        try:
            done = subprocess.run(cmd, check=False, capture_output=True, text=True, errors="replace",
                                  timeout=EXPORT_TIMEOUT_S, stdin=subprocess.DEVNULL,
                                  # the API sets no ceiling to drop, and a preexec_fn is unsafe in a
                                  # process with threads (a notebook, a server): only the command's
                                  preexec_fn=_without_memory_ceiling if process_owned() else None)
        except subprocess.TimeoutExpired:
            raise InputError(p, f"`nsys export` did not finish in {EXPORT_TIMEOUT_S} s") from None
        except OSError as e:
            raise InputError(p, f"could not run {nsys}: {e.strerror}") from None
        if done.returncode != 0 or not out.is_file():
            said = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()] or \
                [ln.strip() for ln in done.stdout.splitlines() if ln.strip()]
            why = said[-1] if said else f"exit status {done.returncode}, no output written"
            raise InputError(p, f"`nsys export --type sqlite` failed: {why}")
        try:
            timeline = read_nsys_sqlite(out, progress=progress)
        except InputError as e:  # name the user's file, not our temporary export
            raise InputError(p, f"the SQLite export nsys wrote is unusable: {e.problem}") from None
    timeline.path = str(p)
    return timeline


def _without_memory_ceiling() -> None:
    """In the nsys child: drop the CLI's address-space ceiling (--max-memory guards our own reading;
    nsys maps far more address space than it uses)."""
    try:
        import resource
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass


def _plain_report(path: Path, tmp: Path) -> Path:
    """nsys cannot read a gzipped report: gunzip it into `tmp` (the input stays untouched)."""
    if not is_gzip(path):
        return path
    name = path.name.removesuffix(".gz")
    plain = tmp / (name if name.endswith(REPORT_EXTENSIONS) else name + ".nsys-rep")
    gunzip_to(path, plain)
    return plain
