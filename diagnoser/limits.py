"""Process-wide guards for hostile or huge input: a memory ceiling and clean exits on signals.

`apply_memory_limit` caps the address space (RLIMIT_AS) so that an input too big for the machine
fails with a MemoryError the CLI reports on one line, instead of the kernel's OOM killer ending
the process (and, with it, the cleanup of temporary files). The default is the machine's physical
memory: nothing real can use more without swapping to death. `--max-memory SIZE` (or
DIAGNOSER_MAX_MEMORY) sets another ceiling; `0`/`none` lifts it.

These are process-wide: only a process diagnoser owns sets them. `owning_process()` marks the
span in which it does (the `diagnose` command's main, a reader's child process); elsewhere (the
Python API in a notebook or a server, whose other threads allocate too) a reader that needs an
address-space ceiling runs in a child process (ingest/mem_snapshot.py), never lowering the caller's.

`exit_cleanly_on_signals` turns SIGTERM and SIGHUP into an exception (as SIGINT already is), so
`finally` blocks and context managers run and temporary files are removed on those exits too.
"""
from __future__ import annotations

import os
import re
import signal
from contextlib import contextmanager

try:
    import resource
except ImportError:  # not POSIX: no limits to set
    resource = None  # type: ignore[assignment]

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
MIN_LIMIT = 256 << 20  # below this the interpreter and its imports do not start
_applied: int | None = None
_owned = 0  # depth of owning_process() blocks: > 0 while diagnoser owns this process


class Terminated(BaseException):
    """SIGTERM/SIGHUP arrived: unwind (cleaning up) and exit 128 + signal number."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextmanager
def owning_process():
    """Within this block the process is diagnoser's (the CLI's main): its process-wide limits may be set."""
    global _owned
    _owned += 1
    try:
        yield
    finally:
        _owned -= 1


def process_owned() -> bool:
    """Is this process diagnoser's own (owning_process), so that RLIMIT_AS may be lowered in it?"""
    return _owned > 0


def parse_size(text: str) -> int | None:
    """'8G', '512M', '2.5GiB', '1000000' -> bytes; '0', 'none', 'off' -> None (no limit)."""
    t = str(text).strip()
    if t.lower() in ("0", "none", "off", "unlimited"):
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?", t, re.IGNORECASE)
    if not m:
        raise ValueError(f"not a memory size: {text!r} (use e.g. 8G, 512M)")
    return max(int(float(m.group(1)) * _UNITS[m.group(2).upper()]), 1)


def physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def default_limit() -> int | None:
    env = os.environ.get("DIAGNOSER_MAX_MEMORY")
    if env:
        try:
            return parse_size(env)
        except ValueError:
            pass  # a typo in the environment must not stop the tool: the safe default applies
    return physical_memory()


def current_memory_limit():
    """The (soft, hard) RLIMIT_AS now, to restore after an in-process run (None: not POSIX)."""
    return None if resource is None else resource.getrlimit(resource.RLIMIT_AS)


def restore_memory_limit(previous) -> None:
    """Give the process its address-space limit back: a caller that runs the CLI in-process (a test,
    a notebook) must not keep the ceiling, nor the children it starts later (a browser maps far more
    address space than it uses)."""
    global _applied
    if resource is None or previous is None:
        return
    try:
        resource.setrlimit(resource.RLIMIT_AS, previous)
    except (ValueError, OSError):
        return
    _applied = None


def apply_memory_limit(limit: int | None) -> int | None:
    """Set the soft RLIMIT_AS to `limit` bytes (None: as high as the hard limit allows)."""
    global _applied
    if resource is None:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    want = hard if limit is None else max(limit, MIN_LIMIT)
    if hard != resource.RLIM_INFINITY:
        want = min(want, hard)
    try:
        resource.setrlimit(resource.RLIMIT_AS, (want, hard))
    except (ValueError, OSError):
        return None
    _applied = None if want == resource.RLIM_INFINITY else want
    return _applied


def memory_limit_text() -> str:
    """How the user raises the ceiling, for the out-of-memory message."""
    if _applied is None:
        return "the machine has too little memory for this input"
    return f"the memory limit is {_applied / (1 << 30):.1f} GiB; raise it with --max-memory"


def _raise_terminated(signum, frame):
    raise Terminated(signum)


def exit_cleanly_on_signals() -> None:
    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None and signal.getsignal(sig) in (signal.SIG_DFL, None):
            signal.signal(sig, _raise_terminated)
