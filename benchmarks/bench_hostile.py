"""Time and peak RSS of `diagnose` on every hostile reproducer of ../shared/hostile/, at full size.

The big cases are made here as their make.sh makes them (sparse files take no disk; the gzip bombs
and the 3M-event trace take a few seconds to write). Target (issues 14, 22): each case one line naming
the file, exit 1 (or a report, exit 0, for the valid 3M-event trace), in under 2 s, no temp file
left, also after SIGTERM. Run: `python benchmarks/bench_hostile.py [--skip-big] [--only TEXT]` (`--only`:
the cases whose name holds TEXT, e.g. `--only tiny-events`).
"""
from __future__ import annotations

import gzip
import json
import os
import resource
import shutil
import signal
import sqlite3
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HOSTILE = REPO.parent / "shared" / "hostile"
DIAGNOSE = [sys.executable, "-m", "diagnoser.cli"]  # the command as its console script runs it (cli.run)


def sparse(path: Path, head: bytes, size: int) -> Path:
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)
    return path


def gz_bomb(path: Path, head: bytes, fill: bytes, size: int, tail: bytes = b"") -> Path:
    with gzip.open(path, "wb", compresslevel=6) as g:
        g.write(head)
        block = fill * ((16 << 20) // len(fill))
        for _ in range(size // len(block)):
            g.write(block)
        g.write(tail)
    return path


def _tiny_event(i: int, n: int, reverse: bool) -> bytes:
    ts = n - i if reverse else i
    if i % 2:
        return b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": %d, "dur": 1}' % ts
    return (b'{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 0, '
            b'"tid": 1, "ts": %d, "dur": 1}' % ts)


def tiny_events(n: int, reverse: bool = True) -> bytes:
    """n minimal kernel/runtime events (no args), ts in reverse order when `reverse`."""
    return b'{"traceEvents": [' + b", ".join(_tiny_event(i, n, reverse) for i in range(n)) + b"]}"


def write_tiny_events(path: Path, n: int, reverse: bool = True) -> Path:
    """tiny_events(n) written as it is made (10M events are 1.27 GB: never held in memory)."""
    with open(path, "wb") as f:
        f.write(b'{"traceEvents": [')
        for lo in range(0, n, 100_000):
            f.write((b", " if lo else b"") + b", ".join(_tiny_event(i, n, reverse) for i in range(lo, min(n, lo + 100_000))))
        f.write(b"]}")
    return path


def run(path: Path, tmp: Path, kill_after: float | None = None, timeout: float = 60) -> dict:
    env = {**os.environ, "TMPDIR": str(tmp)}
    t0 = time.monotonic()
    proc = subprocess.Popen([*DIAGNOSE, str(path), "--format", "json"], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if kill_after is not None:
        time.sleep(kill_after)
        proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    seconds = time.monotonic() - t0
    lines = [ln for ln in err.splitlines() if ln.strip()]
    litter = [str(p.relative_to(tmp)) for p in tmp.rglob("*")]
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # the only child: the CLI
    return {"rc": proc.returncode, "s": seconds, "cpu": usage.ru_utime + usage.ru_stime, "lines": lines,
            "litter": litter, "rss": usage.ru_maxrss / 1024}


def in_child(fn):
    """Run fn in a forked child (so RUSAGE_CHILDREN there sees one CLI run) and return its result."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        out = fn()
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.waitpid(pid, 0)
    return json.loads(data)


def cases(work: Path, big: bool, only: str = "") -> list[tuple[str, Path, float | None]]:
    """The cases; with `only`, the 4 GiB gzip bombs are not made (the rest are small or sparse)."""
    c: list[tuple[str, Path, float | None]] = []
    ws = work / "ws30000000.pt.trace.json"
    ws.write_text('{"distributedInfo": {"rank": 0, "world_size": 30000000}, "traceEvents": [{"ph": "X", '
                  '"cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 2, "dur": 1}]}')
    c.append(("world-size-bomb 3e7", ws, None))
    ws8 = work / "ws100000000.pt.trace.json"
    ws8.write_text(ws.read_text().replace("30000000", "100000000"))
    c.append(("world-size-bomb 1e8", ws8, None))
    ba = work / "case.snapshot.pickle"
    ba.write_bytes(b"\x80\x05\x96" + struct.pack("<Q", 1 << 36) + b"xx.")
    c.append(("bytearray8-pickle", ba, None))
    if (HOSTILE / "numpy-warning-dur" / "case.pt.trace.json.gz").exists():
        c.append(("numpy-warning-dur", HOSTILE / "numpy-warning-dur" / "case.pt.trace.json.gz", None))
    el = work / "lists30M.snapshot.pickle"
    el.write_bytes(b"\x80\x04" + b"]" * (30 << 20) + b".")
    c.append(("pickle-empty-list-bomb 30 MiB", el, None))
    c.append(("kineto-nul 2 GiB sparse", sparse(work / "sparse.pt.trace.json", b'{"traceEvents": [', 2 << 30), None))
    c.append(("ncu-rep zero blocks 2 GiB", sparse(work / "sparse.ncu-rep", b"NVR\0" + struct.pack("<I", 2) + b"\x08\x01",
                                                 2 << 30), None))
    c.append(("ncu-csv 2 GiB line", sparse(work / "sparse.csv", b'"ID","Process ID","Process Name","Kernel Name"\n', 2 << 30), None))
    if (HOSTILE / "sqlite-schema-error-multiline" / "schema.sqlite").exists():
        c.append(("sqlite schema damage", HOSTILE / "sqlite-schema-error-multiline" / "schema.sqlite", None))
    fifo = work / "pipe.json"
    os.mkfifo(fifo)
    c.append(("fifo, no writer", fifo, None))
    loop = work / "loop1"
    loop.symlink_to(work / "loop2")
    (work / "loop2").symlink_to(loop)
    c.append(("symlink loop", loop, None))
    members = work / "empty-members.pt.trace.json.gz"  # issue 22: members that inflate to nothing
    members.write_bytes(gzip.compress(b"", mtime=0) * 2_000_000)
    c.append(("gzip of 2M empty members (40 MB)", members, None))
    spaces = work / "spaces.pt.trace.json"
    spaces.write_bytes(b'{"schemaVersion": 1, "traceEvents": [' + b" " * (100 << 20))
    c.append(("Kineto header + 100 MiB whitespace", spaces, None))
    header = (REPO / "fixtures" / "ncu" / "small_kernels.raw.csv").read_bytes().split(b"\n")[0]
    lines = work / "long-lines.raw.csv"
    with open(lines, "wb") as f:
        f.write(header + b"\n")
        line = b"11," * ((15 << 20) // 3) + b"1\n"
        for _ in range(13):
            f.write(line)
    c.append(("ncu-csv valid header + 13 x 15 MiB lines", lines, None))
    nvtx = work / "nvtx-text.sqlite"
    nvtx.write_bytes(gzip.decompress((REPO / "fixtures" / "nsys" / "sdpa_attention.sqlite.gz").read_bytes()))
    conn = sqlite3.connect(nvtx)
    conn.execute("UPDATE NVTX_EVENTS SET globalTid = 'text' WHERE rowid % 2 = 0")
    conn.commit()
    conn.close()
    c.append(("nsys NVTX globalTid as text", nvtx, None))
    if big and not only:
        c.append(("pickle EMPTY_LIST 4 GiB behind gzip", gz_bomb(work / "lists4G.snapshot.pickle.gz", b"\x80\x04", b"]",
                                                              4 << 30, b"."), None))
        bomb = gz_bomb(work / "bomb.sqlite.gz", b"SQLite format 3\0", b"\0", 4 << 30)
        c.append(("sqlite-gz-bomb 4 GiB", bomb, None))
        real = REPO / "fixtures" / "nsys" / "sdpa_attention.sqlite.gz"
        head = gzip.decompress(real.read_bytes())[:4096]
        valid = gz_bomb(work / "valid-head.sqlite.gz", head, b"\0", 4 << 30)
        c.append(("sqlite-gz-bomb, valid header", valid, None))
        c.append(("sqlite-gz-bomb, SIGTERM at 0.5 s", valid, 0.5))
    if big:
        tiny = work / "tiny3M.pt.trace.json"
        write_tiny_events(tiny, 3_000_000)
        c.append(("tiny-events-3M (valid, 3M events)", tiny, None))
        # issue 31: 10M events (0.98 GB, written as it is made, deleted after its run), against
        # min(0.5x the file, 2 GB) of peak RSS and time linear in events (the 3M case above)
        c.append((TEN_MILLION, work / "tiny10M.pt.trace.json", None))
    return c


TEN_MILLION = "tiny-events-10M (valid, 10M events)"


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(REPO))
    work = Path(tempfile.mkdtemp(prefix="diagnoser-hostile-"))
    print("| case | rc | time | CPU | peak RSS | stderr lines | temp litter | message |\n|---|---|---|---|---|---|---|---|")
    try:
        rows = []
        only = argv[argv.index("--only") + 1] if "--only" in argv else ""
        for name, path, kill in cases(work, "--skip-big" not in argv, only):
            if only not in name:
                continue
            tmp = work / f"tmp-{len(rows)}"
            tmp.mkdir()
            big_file = name == TEN_MILLION
            if big_file:
                write_tiny_events(path, 10_000_000)
            out = in_child(lambda: run(path, tmp, kill, timeout=900 if name.startswith("tiny-events") else 60))
            rows.append((name, out))
            last = out["lines"][-1][:140] if out["lines"] else ""
            size = f" ({out['rss'] * 2**20 / path.stat().st_size:.2f}x the file)" if big_file else ""
            print(f"| {name:<36} | {out['rc']:>4} | {out['s']:6.2f} s | {out['cpu']:6.2f} s | {out['rss']:6.0f} MiB{size} | "
                  f"{len(out['lines'])} | {len(out['litter'])} | {last} |", flush=True)
            if big_file:
                path.unlink()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
