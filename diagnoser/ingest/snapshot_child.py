"""A CUDA memory snapshot read in a child process, for the Python API (issue 31).

Reading a hostile pickle safely needs an address-space ceiling (mem_snapshot._AddressCeiling: a
length field that asks for 64 GiB fails at once). RLIMIT_AS is process-wide: in a notebook or a
server calling `diagnoser.diagnose`, lowering it would make the caller's other threads fail their own
allocations. So where diagnoser does not own the process (limits.process_owned), the snapshot is
read here, in a child that owns its own: it unpickles and builds the MemorySnapshot, and sends that
back as one pickle of the memory model's classes and numpy arrays (the parent loads nothing else).

    python -m diagnoser.ingest.snapshot_child PATH [LABEL INTERVAL]
    # stdout: one pickle, ("ok", MemorySnapshot) or ("error", problem); progress on stderr with a LABEL
"""
from __future__ import annotations

import io
import os
import pickle
import subprocess
import sys
from pathlib import Path

from ..errors import InputError, unexpected_problem

_MODEL = "diagnoser.memory.model"
# what numpy pickles an array as (numpy 1 and 2 spell the module differently)
_NUMPY = {"_reconstruct", "ndarray", "dtype", "_frombuffer", "scalar"}


class _ModelUnpickler(pickle.Unpickler):
    """Loads what the child sent: the memory model's classes, numpy arrays, plain builtins; no other global."""

    def find_class(self, module, name):
        if module == _MODEL or (module.split(".")[0] == "numpy" and name in _NUMPY):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"unexpected {module}.{name} from the snapshot reader's process")


def read_in_child(path, progress=None):
    """load_snapshot(path) run in a child process (see the module docstring); `progress`: a Progress,
    whose stream gets the child's progress lines when the child ends."""
    root = str(Path(__file__).resolve().parents[2])  # the folder holding the diagnoser package
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    cmd = [sys.executable, "-m", __name__, os.fspath(path)]
    if progress is not None and progress.enabled:
        cmd += [progress.label, str(progress.interval)]
    try:
        child = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, env=env)
    except OSError as e:
        raise InputError(path, f"cannot start the snapshot reader's process ({e.strerror or e})") from None
    if progress is not None and progress.enabled and child.stderr:
        progress.stream.write(child.stderr.decode("utf-8", "replace"))
        progress.stream.flush()
    if child.returncode != 0 or not child.stdout:
        how = f"signal {-child.returncode}" if child.returncode < 0 else f"exit {child.returncode}"
        raise InputError(path, f"the snapshot reader's process ended without a result ({how}); "
                               "the machine may have too little memory for this input")
    try:
        status, value = _ModelUnpickler(io.BytesIO(child.stdout)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as e:
        raise InputError(path, f"the snapshot reader's process sent no readable result ({type(e).__name__})") from None
    if status != "ok":
        raise InputError(path, str(value))
    return value


def _read(path: str, label: str | None, interval: float):
    from .. import limits
    from ..progress import Progress
    from .mem_snapshot import load_snapshot  # here: mem_snapshot imports this module
    with limits.owning_process():  # this process is the reader's own: its address space may be capped
        limits.apply_memory_limit(limits.default_limit())
        progress = Progress(label, unit="MB", interval=interval) if label else None
        try:
            return "ok", load_snapshot(path, progress)
        except InputError as e:
            return "error", e.problem
        except MemoryError:
            return "error", f"ran out of memory while reading ({limits.memory_limit_text()})"
        except Exception as e:  # noqa: BLE001 - said in words, never a traceback
            return "error", unexpected_problem(e)


def main(argv: list[str]) -> int:
    path, label, interval = argv[0], (argv[1] if len(argv) > 1 else None), float(argv[2]) if len(argv) > 2 else 1.0
    result = _read(path, label, interval)
    try:
        blob = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
    except (MemoryError, RecursionError) as e:
        blob = pickle.dumps(("error", f"the snapshot is too large to hand back ({type(e).__name__})"))
    sys.stdout.buffer.write(blob)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
