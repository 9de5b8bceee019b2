"""Text from an input, made safe where a report or a suggested command puts it (docs/hostile_input.md).

Kernel, op, frame and file names come from the profiled program and the command line: anything can
be in them. This one module says how such text is shown and quoted; every renderer and every command
builder uses it, so the rules live in one place:

- `visible_line` / `visible_text`: control characters (C0, DEL, C1: the start of every CSI, OSC and
  DCS escape sequence) and the invisible format characters that reorder or hide text (bidi
  overrides and isolates such as U+202E, zero-width characters, line separators) are shown escaped
  (`\\x1b`, `\\u202e`), so nothing reaches a terminal raw; `visible_text` keeps newlines and tabs.
- `displayable`: the same over a whole report (dataclasses, dicts, lists), before it is drawn.
  The same characters also include lone surrogates and U+FFFE/U+FFFF, so `visible_text` output is
  XML 1.0 character data (JUnit) and encodes as UTF-8.
- `json_text`: a JSON text with those characters as `\\uXXXX` escapes (the values unchanged).
- `md_code`: a Markdown code span that holds any text (backticks inside widen the delimiter).
- `md_inert`: a whole Markdown report with every `<` that could open raw HTML outside code escaped.
- `shell_word` / `shell_fill`: a value in a suggested command stays one argument (shlex.quote).
- `regex_any_of`: a regex matching names literally, with nothing in it a shell, a terminal or the
  rule engine changes.

Names people actually write (C++ templates, paths with spaces) pass through unchanged.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import re
import shlex

# code points that are shown escaped: C0 controls, DEL, C1 controls (0x9b is CSI, 0x9d OSC, 0x90 DCS)...
_CONTROLS = [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]
# ...and the format characters that make text read other than it is: Arabic letter mark, zero-width
# space/joiners, LRM/RLM, line/paragraph separators, bidi embeddings and overrides (U+202A-U+202E),
# word joiner and invisible operators, bidi isolates (U+2066-U+2069), BOM, interlinear annotation.
_INVISIBLE = [0x061C, *range(0x200B, 0x2010), 0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2060, 0x2065),
              *range(0x2066, 0x206A), 0xFEFF, *range(0xFFF9, 0xFFFC)]
# ...and what is no character at all: lone surrogates (a JSON `\ud800` reads as one; UTF-8 cannot
# encode it) and the noncharacters U+FFFE/U+FFFF (XML 1.0 forbids them; a byte-order probe reads them)
_NONCHARACTERS = [*range(0xD800, 0xE000), 0xFFFE, 0xFFFF]
_SHORT = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}


def _escape(cp: int) -> str:
    return _SHORT.get(cp) or (f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}")


# (the 2,048 surrogates' escapes, the same in every table, made once: a dict comprehension each cost ~1 ms a start)
_SURROGATES = {cp: f"\\u{cp:04x}" for cp in _NONCHARACTERS if 0xD800 <= cp < 0xE000}
_LINE = {**{cp: _escape(cp) for cp in _CONTROLS + _INVISIBLE + _NONCHARACTERS if cp not in _SURROGATES}, **_SURROGATES}
_TEXT = dict(_LINE)
del _TEXT[0x09], _TEXT[0x0A]


def visible_line(text) -> str:
    """`text` on one line with every control and invisible format character shown escaped."""
    return str(text).translate(_LINE)


def visible_text(text) -> str:
    """Like visible_line, but newlines and tabs stay (multi-line text: a whole report, a rule's message)."""
    return str(text).translate(_TEXT)


# JSON: what visible_line escapes, as a `\\uXXXX` escape (json.dumps already escapes C0 itself)
_JSON = {**{cp: f"\\u{cp:04x}" for cp in _LINE if cp >= 0x20 and cp not in _SURROGATES}, **_SURROGATES}


@functools.cache
def _json_any() -> re.Pattern:
    """A character json_text escapes (compiled for the first JSON text: a Markdown report needs none)."""
    return re.compile("[" + "".join(re.escape(chr(cp)) for cp in sorted(_JSON) if not 0xD800 <= cp < 0xE000)
                      + "\ud800-\udfff]")


def json_text(dumped: str) -> str:
    """JSON text (json.dumps with ensure_ascii=False) with every character visible_line escapes
    written as a `\\uXXXX` escape: parsed, every value is as read; shown, nothing acts on a terminal.
    Outside its strings JSON text is ASCII, so the whole text is translated at once."""
    return dumped.translate(_JSON) if _json_any().search(dumped) else dumped  # (searching is 10x faster)


def md_code(text) -> str:
    """`text` as one Markdown code span: shown on one line, and a backtick inside cannot close it (the
    delimiter is one backtick longer than the longest run inside, CommonMark 6.1)."""
    return code_span(visible_line(text))


def code_span(text: str) -> str:
    """`text` (already one line) between backticks, the delimiter longer than any backtick run inside."""
    if "`" not in text:
        return f"`{text}`"
    fence = "`" * (max(len(run) for run in re.findall(r"`+", text)) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


# `<` that starts raw HTML in CommonMark (a tag, a closing tag, a comment, a declaration, a processing
# instruction) or an autolink; `<=`, `< 5%` start nothing
_HTML_START = re.compile(r"<(?=[A-Za-z/!?])")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def md_inert(markdown: str) -> str:
    """A Markdown document with every `<` that could open raw HTML backslash-escaped outside code spans
    and fenced code: a viewer that passes HTML through (markdown-it with html=True, wikis, notebooks)
    shows `<script>` from a kernel or file name as text, and every viewer renders the same `<`."""
    out, fence = [], None
    for line in markdown.split("\n"):
        m = _FENCE.match(line)
        if fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line[m.end():].strip():
                fence = None
            out.append(line)
        elif m and not (m.group(1)[0] == "`" and "`" in line[m.end():]):
            fence = m.group(1)
            out.append(line)
        else:
            out.append(_inert_line(line))
    return "\n".join(out)


def _inert_line(line: str) -> str:
    if "<" not in line:
        return line
    out, i, n = [], 0, len(line)
    while i < n:
        c = line[i]
        if c == "\\":  # a backslash escape is kept whole (`\\<` is already text)
            out.append(line[i:i + 2])
            i += 2
        elif c == "`":  # a code span (a run of N backticks closed by the next run of exactly N) stays as it is
            j = i
            while j < n and line[j] == "`":
                j += 1
            run = line[i:j]
            close = re.compile(r"(?<!`)" + run + r"(?!`)").search(line, j)
            end = close.end() if close else j
            out.append(line[i:end])
            i = end
        else:
            j = i
            while j < n and line[j] not in "\\`":
                j += 1
            out.append(_HTML_START.sub(r"\\<", line[i:j]))
            i = j
    return "".join(out)


def shell_word(text) -> str:
    """`text` as one shell argument (unchanged when it holds only characters a shell leaves alone)."""
    return shlex.quote(str(text))


def shell_fill(value: str, quote: str | None) -> str:
    """`value` placed in a command line where the text before it left `quote` open (None, `'` or `"`):
    it stays part of one argument and nothing in it runs."""
    if quote == "'":
        return value.replace("'", "'\"'\"'")  # close, a quoted quote, reopen: shlex.quote's own trick
    if quote == '"':
        return value if shell_word(value) == value else '"' + shell_word(value) + '"'
    return shell_word(value)


def open_quote(command: str) -> str | None:
    """The shell quote (`'` or `"`) left open at the end of `command`, else None."""
    quote, escaped = None, False
    for ch in command:
        if escaped:
            escaped = False
        elif quote == "'":
            quote = None if ch == "'" else quote
        elif ch == "\\":
            escaped = True
        elif quote == '"':
            quote = None if ch == '"' else quote
        elif ch in "'\"":
            quote = ch
    return quote


# programs a rule's code span can start with to make it a command line (after VAR=value assignments)
COMMAND_PROGRAMS = frozenset({"ncu", "nsys", "diagnose", "python", "python3", "torchrun", "nvidia-smi",
                              "compute-sanitizer", "nvcc", "pip", "env", "sudo", "cuobjdump", "nvdisasm"})
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=\S*$")


def is_command(code: str) -> bool:
    """Is this code span's text a command line a reader pastes into a shell?"""
    words = code.split()
    while words and _ASSIGNMENT.match(words[0]):
        words = words[1:]
    return bool(words) and words[0] in COMMAND_PROGRAMS


# a regex metacharacter as a one-character class: no backslash (the rule engine keeps a string fact
# as printable ASCII without `\` or `"`, engine/records.py), the same in Python, PCRE and ECMAScript
_REGEX_CLASS = {c: f"[{c}]" for c in ".$*+?(){}|"}
FACT_TEXT_LIMIT = 200  # characters of a string fact the rule engine keeps (engine/records.py)


def regex_atoms(text) -> list[str]:
    """`text` as regex pieces that each match one character of it: letters, digits and punctuation
    no regex flavour minds as themselves, metacharacters as classes (`[.]`), and `.` for the rest
    (controls, `\\`, `"`, `^`, `[`, `]`, non-ASCII): a pattern without a backslash or a double quote (which the
    engine would change; the rule text shell-quotes it), still matching the name (`ncu --kernel-name-base demangled -k regex:`)."""
    out = []
    for c in str(text):
        if c in _REGEX_CLASS:
            out.append(_REGEX_CLASS[c])
        elif " " <= c <= "~" and c not in "\\\"^[]":
            out.append(c)
        else:
            out.append(".")
    return out


def regex_any_of(names, limit: int = FACT_TEXT_LIMIT) -> str:
    """`a|b|c` matching any of `names` (regex_atoms each), at most `limit` characters, cut between
    atoms where it is longer (the last name kept is then a prefix, which still matches it)."""
    atoms: list[str] = []
    for i, name in enumerate(names):
        atoms += (["|"] if i else []) + regex_atoms(name)
    out, size = [], 0
    for a in atoms:
        if size + len(a) > limit:
            break
        out.append(a)
        size += len(a)
    return "".join(out).rstrip("|")


# fields that hold authored prose (rule texts, collect hints): their line breaks stay
PROSE_FIELDS = frozenset({"title", "message", "fix", "verify", "collect"})
_SCALARS = frozenset({int, float, bool})  # nothing in them to show


# a dataclass field's metadata for what no text renderer reads (displayable leaves it as it is)
NOT_SHOWN = {"shown": False}


@functools.lru_cache(maxsize=None)
def _field_names(kind: type) -> tuple[str, ...]:
    """A dataclass's field names that a renderer may show (dataclasses.fields builds its tuple on every call)."""
    return tuple(f.name for f in dataclasses.fields(kind) if f.metadata.get("shown", True))


def displayable(obj, line: bool = True):
    """`obj` (a Report, a Finding, a comparison dict...) with every string in it shown by visible_line
    (prose fields by visible_text), for a text or HTML renderer; JSON renders the original. Objects
    with nothing to escape come back as they are (the same object); so do a dataclass's NOT_SHOWN fields."""
    kind = type(obj)
    if kind is str:
        if obj.isascii() and obj.isprintable():  # (most names: nothing to escape, no per-character lookups)
            return obj
        out = obj.translate(_LINE if line else _TEXT)
        return obj if out == obj else out
    if obj is None or kind in _SCALARS:
        return obj
    if isinstance(obj, str):  # Markup and the like: already rendered
        return obj
    if isinstance(obj, dict):
        items = [(displayable(k), displayable(v)) for k, v in obj.items()]
        same = all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(items, obj.items()))
        return obj if same else dict(items)
    if isinstance(obj, (list, tuple)):
        items = [displayable(v) for v in obj]
        if all(a is b for a, b in zip(items, obj)):
            return obj
        return items if isinstance(obj, list) else (type(obj)(*items) if hasattr(obj, "_fields") else tuple(items))
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changed = {}
        for name in _field_names(kind):
            value = getattr(obj, name, None)
            safe = displayable(value, name not in PROSE_FIELDS)
            if safe is not value:
                changed[name] = safe
        if not changed:
            return obj
        out = copy.copy(obj)
        for name, value in changed.items():
            object.__setattr__(out, name, value)  # frozen dataclasses too
        return out
    return obj
