"""Where a report goes: the format from --format or the -o extension, and an atomic write (temp
file + rename: nothing half-written, no temp file left). An -o that is one of the inputs (the same
file: by name, through a symbolic or a hard link, inside a folder given as input) is refused."""
from __future__ import annotations

import glob
import os
import tempfile
from pathlib import Path

import click

from ..errors import DiagnoserError
from ..ingest.expansion import TRACE_SUFFIXES, is_url

EXTENSION_FORMATS = {".md": "md", ".markdown": "md", ".json": "json", ".html": "html", ".htm": "html",
                     ".xml": "junit"}


def output_format(fmt: str | None, output: str | None, stdout_is_tty: bool,
                  formats: tuple[str, ...] = ("md", "json", "html", "junit"), inputs=()) -> str:
    """--format, else the -o file's extension (one of `formats`: else an error naming them), else
    `terminal` for a terminal and `md` for a pipe. The destination is checked here too, before any
    work is done for it (check_destination; `inputs`: what the command reads, never written over)."""
    check_destination(output, inputs)
    if fmt:
        return fmt
    if output and output != "-":
        suffix = Path(output).suffix.lower()
        known = {ext: f for ext, f in EXTENSION_FORMATS.items() if f in formats}
        if suffix not in known:
            exts = ", ".join(f"{ext} ({f})" for ext, f in known.items())
            raise DiagnoserError(f"-o {output}: {'the extension ' + suffix if suffix else 'no extension'} names no "
                                 f"report format; use one of {exts}, or say --format {'|'.join(formats)}")
        return known[suffix]
    return "terminal" if stdout_is_tty else "md"


def check_destination(output: str | None, inputs=()) -> None:
    """-o names a file in a folder that exists (a missing folder is a typo more often than a wish:
    it is an error, never created), and none of `inputs` (files, folders, globs the command reads)."""
    if not output or output == "-":
        return
    target = Path(output)
    same = _input_at(output, inputs)
    if same is not None:
        raise DiagnoserError(f"-o {output}: is the input {same}; a report never replaces an input: name another file")
    if target.is_dir() or str(output).endswith(("/", os.sep)):
        raise DiagnoserError(f"-o {output}: is a directory; name a file, e.g. -o {Path(output) / 'report.md'}")
    parent = target.parent
    if not parent.exists():
        raise DiagnoserError(f"-o {output}: no folder {parent}; create it first")
    if not parent.is_dir():
        raise DiagnoserError(f"-o {output}: cannot write there ({parent} is not a folder)")


# the files of a folder given as input that are read: trace files (ingest.expansion) and rule files
READ_IN_FOLDER = TRACE_SUFFIXES + (".yaml",)


def _input_at(output: str, inputs) -> str | None:
    """The input that `output` already is (the same file by device and inode: a symbolic or hard link
    to an input is that input; in a folder given as input, the trace and rule files it holds), else
    None. Nothing is looked up when `output` does not exist yet."""
    try:
        out = os.stat(output)
    except (OSError, ValueError):
        return None
    key = (out.st_dev, out.st_ino)

    def same(path: str) -> bool:
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            return False
        return (st.st_dev, st.st_ino) == key

    for raw in inputs:
        p = str(raw)
        if is_url(p):
            continue  # never a local file
        p = p.removeprefix("file://")
        if os.path.isdir(p):
            try:
                names = os.listdir(p)
            except OSError:
                continue
            found = next((os.path.join(p, n) for n in sorted(names)
                          if n.lower().endswith(READ_IN_FOLDER) and same(os.path.join(p, n))), None)
            if found is not None:
                return found
        elif same(p):
            return p
        elif not os.path.exists(p):
            found = next((f for f in glob.glob(p) if same(f)), None)
            if found is not None:
                return found
    return None


def write_output(text: str, output: str | None, ansi: bool = False, inputs=()) -> None:
    """Write to stdout, or atomically to a file (temp file + rename: nothing half-written); never over
    one of `inputs`. `ansi`: the text is drawn for a terminal; keep its escape codes even when stdout is a pipe."""
    if not output or output == "-":
        click.echo(text, nl=False, color=True if ansi else None)
        return
    target = Path(output)
    check_destination(output, inputs)
    try:
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
