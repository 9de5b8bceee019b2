"""Case-blind name patterns, searched fast: `found(pattern, text)` is `pattern.search(text) is not None`.

Python's regex engine runs a re.IGNORECASE alternation by folding every character of the text for every
branch at every position, so the kernel-name patterns (dozens of branches, names of 200-1,100 characters)
cost ~0.3 us a character: 13 ms to put 61 kernel names in their categories. On ASCII text the same search is
the pattern with its letters lower-cased, without the flag, over the text lower-cased: the same answer
(for ASCII, case folding is lower-casing, and no non-ASCII character can match), 5-8x faster. A pattern
whose lower-cased twin could mean something else (an escape that names a character or a class by its case,
inline flags, named groups, a letter range across cases) keeps its own search, as does non-ASCII text.
"""
from __future__ import annotations

import re

# escapes whose meaning does not depend on being lower-cased with the text: classes, anchors, control
# characters, back-references (digits), and escaped punctuation
_KEPT_ESCAPES = frozenset("wWdDsSbBAZtnrfv0123456789") | frozenset(chr(c) for c in range(33, 127)
                                                                  if not chr(c).isalnum())
_MISSING = object()
_TWINS: dict[re.Pattern, re.Pattern | None] = {}


def lower_twin(pattern: re.Pattern) -> re.Pattern | None:
    """The pattern for lower-cased ASCII text (None where no twin is sure to match the same)."""
    twin = _TWINS.get(pattern, _MISSING)
    if twin is _MISSING:
        twin = _TWINS[pattern] = _lower_twin(pattern)
    return twin


def _lower_twin(pattern: re.Pattern) -> re.Pattern | None:
    source = pattern.pattern
    if not pattern.flags & re.IGNORECASE or not isinstance(source, str) or not source.isascii():
        return None
    out, i, in_class = [], 0, False
    while i < len(source):
        c = source[i]
        if c == "\\":
            escaped = source[i + 1:i + 2]
            if escaped not in _KEPT_ESCAPES:  # \x41, \N{...}, \u..., a letter escape we do not know: keep the pattern
                return None
            out.append(source[i:i + 2])
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
            elif c == "-" and out and source[i + 1:i + 2] not in ("]", ""):
                low, high = source[i - 1], source[i + 1]
                letters = low.isalpha() and high.isalpha() and low.isupper() == high.isupper()  # [A-Z], [a-f]
                if (low.isalpha() or high.isalpha()) and not letters:
                    return None  # [A-z], [0-z]: lower-casing would change the set
        elif c == "[":
            in_class = True
            if source[i + 1:i + 2] == "^":
                out.append("[^")
                i += 2
                if source[i:i + 1] == "]":  # a leading ] is a member
                    out.append("]")
                    i += 1
                continue
            if source[i + 1:i + 2] == "]":
                out.append("[]")
                i += 2
                continue
        elif c == "(" and source[i + 1:i + 2] == "?" and source[i + 2:i + 3] not in (":", "=", "!", "<"):
            return None  # inline flags, named groups, conditionals
        out.append(c.lower())
        i += 1
    try:
        return re.compile("".join(out), pattern.flags & ~re.IGNORECASE)
    except re.error:
        return None


def ascii_lower(text: str) -> str | None:
    """`text.lower()` for ASCII text (what the twins search), None for any other text."""
    return text.lower() if text.isascii() else None


def found(pattern: re.Pattern, text: str, lowered: str | None = _MISSING) -> bool:
    """`pattern.search(text) is not None`; `lowered`: `ascii_lower(text)` when the caller searches one text
    with several patterns."""
    twin = lower_twin(pattern)
    if twin is not None:
        if lowered is _MISSING:
            lowered = ascii_lower(text)
        if lowered is not None:
            return twin.search(lowered) is not None
    return pattern.search(text) is not None


def found_each(pattern: re.Pattern, texts: list[str], lowered: list[str | None]) -> list[bool]:
    """`found` for each text, `lowered` their `ascii_lower` (a name set's, computed once)."""
    twin = lower_twin(pattern)
    if twin is None:
        return [pattern.search(t) is not None for t in texts]
    return [(pattern.search(t) if low is None else twin.search(low)) is not None for t, low in zip(texts, lowered)]
