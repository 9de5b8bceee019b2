"""Where a report goes: the format from --format or the -o extension, and an atomic write (temp
file + rename: nothing half-written, no temp file left)."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import click

from ..errors import DiagnoserError

EXTENSION_FORMATS = {".md": "md", ".markdown": "md", ".json": "json", ".html": "html", ".htm": "html",
                     ".xml": "junit"}


def output_format(fmt: str | None, output: str | None, stdout_is_tty: bool,
                  formats: tuple[str, ...] = ("md", "json", "html", "junit")) -> str:
    """--format, else the -o file's extension (one of `formats`: else an error naming them), else
    `terminal` for a terminal and `md` for a pipe. The destination is checked here too, before any
    work is done for it (check_destination)."""
    check_destination(output)
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


def check_destination(output: str | None) -> None:
    """-o names a file in a folder that exists (a missing folder is a typo more often than a wish:
    it is an error, never created)."""
    if not output or output == "-":
        return
    target = Path(output)
    if target.is_dir() or str(output).endswith(("/", os.sep)):
        raise DiagnoserError(f"-o {output}: is a directory; name a file, e.g. -o {Path(output) / 'report.md'}")
    parent = target.parent
    if not parent.exists():
        raise DiagnoserError(f"-o {output}: no folder {parent}; create it first")
    if not parent.is_dir():
        raise DiagnoserError(f"-o {output}: cannot write there ({parent} is not a folder)")


def write_output(text: str, output: str | None, ansi: bool = False) -> None:
    """Write to stdout, or atomically to a file (temp file + rename: nothing half-written).
    `ansi`: the text is drawn for a terminal; keep its escape codes even when stdout is a pipe."""
    if not output or output == "-":
        click.echo(text, nl=False, color=True if ansi else None)
        return
    target = Path(output)
    check_destination(output)
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
