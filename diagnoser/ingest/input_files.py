"""Opening an input safely: `open_input` returns a binary stream with gzip undone; readers use it
so `.gz` is transparent everywhere (diagnoser.ingest.sniff tells the kind from the content).

Hostile input is refused before work is spent on it: only regular files are opened (a FIFO, a
device or a symlink loop gets one line, and a FIFO swapped in after the check cannot block the
open), and gzip is undone by a streaming decompressor with a bound (`gzip_limit`): a file may
expand to GZIP_MAX_RATIO times its own size, or to GZIP_FREE_BYTES whatever its size, never more.
Unpacking to disk (`gunzip_to`) also checks the first bytes before writing any and stops before the
temporary folder's free space runs out.
"""
from __future__ import annotations

import errno
import io
import re
import os
import stat
import zlib
from pathlib import Path
from typing import BinaryIO, Callable

from ..errors import InputError

try:  # ISA-L's inflate (python-isal): zlib's stream API and output, 2.4x its speed (a 126 MB trace's gzip 94 -> 39 ms)
    from isal import isal_zlib as _inflate
except ImportError:  # (a platform its wheels do not cover)
    _inflate = zlib
_INFLATE_ERRORS = (zlib.error, _inflate.error)

GZIP_MAGIC = b"\x1f\x8b"
# Real profiler files compress 5-26x (fixtures, corpus and external files measured); gzip's own
# maximum is ~1030x, reached only by runs of one byte: a bomb, not a profile.
GZIP_MAX_RATIO = int(os.environ.get("DIAGNOSER_GZIP_MAX_RATIO", "64"))
GZIP_FREE_BYTES = 32 << 20
TMP_RESERVE_BYTES = 64 << 20  # unpacking stops while this much is still free in the temp folder
_CHUNK = 1 << 20
# gzip members: real files hold one (gzip, pigz) or one per 64 KiB (bgzip); a member that inflates to
# almost nothing costs the same Python work as a big one, so past this many of them the file is refused
GZIP_MAX_SMALL_MEMBERS = 4096
GZIP_SMALL_MEMBER = 1024  # bytes of output below which a member counts as small
# inflated bytes per zlib call: each call's output is a fresh bytes object copied into the reader's buffer, and
# at 256 KiB the allocator reuses its memory (whole 2 MiB outputs faulted ~250 new pages a read, ~1 ms)
_OUT_PIECE = 256 << 10
_MEMBER_FEED = 1024  # compressed bytes first given to zlib for a new member (doubling while it lasts)
DECLARED_SLACK = 16 << 20  # output allowed past the size a file's header declares


# ---------------------------------------------------------------- regular files only

def _mode_problem(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a directory, expected a profiler file"
    if stat.S_ISFIFO(mode):
        return ("is a FIFO (named pipe), not a regular file: save the profiler output to a file "
                "and pass that")
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "is a device, not a regular file: pass the profiler's output file"
    if stat.S_ISSOCK(mode):
        return "is a socket, not a regular file: pass the profiler's output file"
    return "is not a regular file"


def _os_problem(path, e: OSError) -> str:
    if e.errno == errno.ELOOP:
        return "symlink loop (the link leads back to itself); point it at the profiler file"
    if e.errno == errno.ENOENT:
        if os.path.islink(path):
            return f"broken symlink (its target {os.readlink(path)} does not exist)"
        return "no such file"
    if e.errno == errno.ENOTDIR:
        return "no such file (a part of the path is not a folder)"
    if e.errno == errno.EACCES:
        return "permission denied"
    if e.errno == errno.ENAMETOOLONG:
        return "file name too long"
    return f"cannot open: {e.strerror or e}"


def regular_file(path: str | os.PathLike) -> os.stat_result:
    """stat() of an input that must be a regular file; InputError names anything else."""
    try:
        st = os.stat(path)
    except (OSError, ValueError) as e:
        raise InputError(path, _os_problem(path, e) if isinstance(e, OSError) else "invalid file name") from None
    problem = _mode_problem(st.st_mode)
    if problem:
        raise InputError(path, problem)
    return st


def open_regular(path: str | os.PathLike) -> BinaryIO:
    """Open a regular file for binary reading; never blocks on a FIFO, even one swapped in late."""
    regular_file(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise InputError(path, _os_problem(path, e)) from None
    try:
        problem = _mode_problem(os.fstat(fd).st_mode)
        if problem:
            raise InputError(path, problem)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def is_gzip(path: str | os.PathLike) -> bool:
    with open_regular(path) as f:
        return f.read(2) == GZIP_MAGIC


# ---------------------------------------------------------------- bounded gzip

def gzip_limit(compressed_size: int) -> int:
    """Most bytes a gzip of `compressed_size` bytes may expand to before it is refused as a bomb."""
    return max(GZIP_FREE_BYTES, GZIP_MAX_RATIO * compressed_size)


class _Inflater(io.RawIOBase):
    """gzip members (concatenated ones too) inflated in bounded pieces, refused past `limit`.

    The compressed chunk is read through an offset, never sliced: zlib is fed a piece at a time (a
    new member a little first, doubling while it lasts), so what it copies back (unused_data,
    unconsumed_tail) is at most that piece, and many tiny members cost their own size, not a chunk
    each. Members that inflate to almost nothing are counted and bounded (GZIP_MAX_SMALL_MEMBERS)."""

    def __init__(self, fileobj: BinaryIO, path, limit: int):
        self.fileobj, self.path, self.limit = fileobj, path, limit
        self.produced = 0
        self._z = _inflate.decompressobj(16 + zlib.MAX_WBITS)
        self._pending = b""  # compressed bytes read, from self._pos on not yet given to zlib
        self._pos = 0
        self._in_member = False
        self._done = False
        self._member_out = 0  # output of the current member
        self._small = 0  # members that inflated to less than GZIP_SMALL_MEMBER bytes
        self._feed = _MEMBER_FEED

    def readable(self) -> bool:
        return True

    def _fill(self) -> bool:
        if self._pos < len(self._pending):
            return True
        self._pending, self._pos = self.fileobj.read(_CHUNK), 0
        return bool(self._pending)

    def readinto(self, b) -> int:
        want = min(len(b), _OUT_PIECE)  # (the BufferedReader above asks again until its read is whole)
        while not self._done:
            if not self._fill():
                if self._in_member:
                    raise InputError(self.path, "truncated gzip data: the file ends inside a gzip member (a truncated or corrupt copy)")
                self._done = True
                break
            if not self._in_member:
                data = _NON_ZERO.search(self._pending, self._pos)  # gzip allows zero padding after a member
                if data is None:
                    self._pos = len(self._pending)
                    continue
                self._pos = data.start()
                if len(self._pending) - self._pos < 2:
                    more = self.fileobj.read(_CHUNK)
                    if more:
                        self._pending, self._pos = self._pending[self._pos:] + more, 0
                        continue
                if self._pending[self._pos:self._pos + 2] != GZIP_MAGIC:
                    raise InputError(self.path, "corrupt gzip data (what follows the last member is not gzip)")
                self._in_member = True
            with memoryview(self._pending) as view:
                feed = view[self._pos:self._pos + self._feed]
                try:
                    out = self._z.decompress(feed, want)
                except _INFLATE_ERRORS as e:
                    raise InputError(self.path, f"truncated or corrupt gzip data ({e})") from None
                finally:
                    fed = len(feed)
                    feed.release()
            if self._z.eof:
                self._pos += fed - len(self._z.unused_data)
                self._z = _inflate.decompressobj(16 + zlib.MAX_WBITS)
                self._in_member = False
                self._end_member(len(out))
            else:
                self._pos += fed - len(self._z.unconsumed_tail)
                self._member_out += len(out)
                if not self._z.unconsumed_tail:
                    self._feed = min(self._feed * 2, _CHUNK)
            if out:
                self.produced += len(out)
                if self.produced > self.limit:
                    raise InputError(self.path, _bomb_message(self.fileobj, self.limit))
                b[:len(out)] = out
                return len(out)
        return 0

    def _end_member(self, last: int) -> None:
        if self._member_out + last < GZIP_SMALL_MEMBER:
            self._small += 1
            if self._small > GZIP_MAX_SMALL_MEMBERS:
                raise InputError(self.path, f"more than {GZIP_MAX_SMALL_MEMBERS:,} gzip members that hold (almost) "
                                            "nothing: not a compressed profile")
        self._member_out = 0
        self._feed = _MEMBER_FEED


_NON_ZERO = re.compile(rb"[^\x00]")


def _bomb_message(raw, limit: int) -> str:
    try:
        size = os.fstat(raw.fileno()).st_size
    except (OSError, AttributeError, ValueError):
        size = 0
    return (f"gzip expands past {limit >> 20} MiB ({GZIP_MAX_RATIO}x its {size:,} bytes, or "
            f"{GZIP_FREE_BYTES >> 20} MiB): a decompression bomb, not a profile; gunzip it yourself "
            "if it is real (or raise DIAGNOSER_GZIP_MAX_RATIO)")


class GzipStream(io.BufferedReader):
    """Buffered binary stream over an inflated gzip file; `fileobj` is the compressed file
    (its tell() is the compressed position, for progress); forward seeks read and discard."""

    def __init__(self, raw_file: BinaryIO, path, limit: int):
        self.fileobj = raw_file
        self.inflater = _Inflater(raw_file, path, limit)
        super().__init__(self.inflater, 1 << 16)

    def seekable(self) -> bool:
        return False

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        here = self.tell()
        target = here + offset if whence == os.SEEK_CUR else offset if whence == os.SEEK_SET else None
        if target is None or target < here:
            raise io.UnsupportedOperation("a gzip stream only seeks forward")
        left = target - here
        while left > 0:
            got = len(self.read(min(left, _CHUNK)))
            if not got:
                break
            left -= got
        return self.tell()

    def tell(self) -> int:
        return self.inflater.produced - len(self.peek(0)) if not self.closed else 0

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.fileobj.close()


def open_input(path: str | os.PathLike) -> BinaryIO:
    """Open an input for binary reading, transparently (and boundedly) gunzipping it."""
    f = open_regular(path)
    try:
        magic = f.read(2)
        f.seek(0)
        if magic == GZIP_MAGIC:
            return GzipStream(f, path, gzip_limit(os.fstat(f.fileno()).st_size))
    except OSError as e:
        f.close()
        raise InputError(path, f"cannot read: {e.strerror or e}") from None
    return f


def _gzip_size_hint(f: BinaryIO) -> int:
    """The gzip trailer's ISIZE: the (last member's) size mod 2**32, a lower bound of the output."""
    try:
        size = os.fstat(f.fileno()).st_size
        if size < 18:
            return 0
        here = f.tell()
        f.seek(size - 4)
        hint = int.from_bytes(f.read(4), "little")
        f.seek(here)
        return hint
    except OSError:
        return 0


def gunzip_to(path: str | os.PathLike, dest: Path, check_head: Callable[[bytes], int | None] | None = None,
              head_bytes: int = 100) -> None:
    """Decompress the gzipped file at `path` into the file `dest` (for tools that need a plain file).

    `check_head(first_bytes)` runs before anything is written (raise InputError to refuse; return
    the size the format's own header declares, or None); the output is bounded by that size (plus
    DECLARED_SLACK), by `gzip_limit` and by the free space of dest's folder. `dest` is removed
    when anything fails (an interrupt included).
    """
    dest = Path(dest)
    with open_regular(path) as raw:
        need = _gzip_size_hint(raw)
        free = _free_bytes(dest.parent)
        if free is not None and need > free - TMP_RESERVE_BYTES:
            raise InputError(path, _no_room(need, free, dest.parent))
        stream = GzipStream(raw, path, gzip_limit(os.fstat(raw.fileno()).st_size))
        try:
            head = stream.peek(head_bytes)[:head_bytes]
            declared = check_head(head) if check_head is not None else None
            written = 0
            with open(dest, "wb") as out:
                while True:
                    chunk = stream.read(4 << 20)
                    if not chunk:
                        break
                    written += len(chunk)
                    if declared is not None and written > declared + DECLARED_SLACK:
                        raise InputError(path, f"unpacks past the {declared:,} bytes its own header declares: "
                                               "corrupt, or a decompression bomb")
                    free = _free_bytes(dest.parent)
                    if free is not None and len(chunk) > free - TMP_RESERVE_BYTES:
                        raise InputError(path, _no_room(written, free, dest.parent))
                    out.write(chunk)
        except BaseException as e:
            try:
                dest.unlink()
            except OSError:
                pass
            if isinstance(e, OSError) and not isinstance(e, InputError):
                raise InputError(path, f"cannot decompress into {dest.parent}: {e.strerror or e}") from None
            raise


def _free_bytes(folder: Path) -> int | None:
    try:
        st = os.statvfs(folder)
    except (OSError, AttributeError):
        return None
    return st.f_bavail * st.f_frsize


def _no_room(need: int, free: int, folder: Path) -> str:
    return (f"unpacking needs more than the {max(free, 0) >> 20} MiB free in {folder} (at least "
            f"{need >> 20} MiB); set TMPDIR to a folder with room, or gunzip it yourself")


def as_text_stream(path) -> io.TextIOBase:
    return io.TextIOWrapper(open_input(path), encoding="utf-8", errors="replace", newline="")
