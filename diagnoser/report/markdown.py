"""A small Markdown subset as escaped HTML: headings, paragraphs, lists, block quotes, tables,
fenced code, inline code, emphasis and links. Every piece of text is escaped, so nothing in a
playbook or a rule can inject markup; links go only to the web, anchors or relative paths.
"""
from __future__ import annotations

import re

from markupsafe import Markup, escape


def fence_marker(line: str) -> str | None:
    """The ``` or ~~~ run that opens (or closes) a fenced code block on this line, else None."""
    m = re.match(r"^ {0,3}(`{3,}|~{3,})", line)
    return m.group(1) if m else None


_INLINE = re.compile(
    r"(?P<esc>\\[\\`*_\[\]()#+\-.!<>|{}])"
    r"|(?P<code>(?P<ticks>`+)(?P<codetext>.+?)(?P=ticks))"
    r"|(?P<link>\[(?P<label>[^\]]+)\]\((?P<href>[^)\s]+)(?:\s+\"[^\"]*\")?\))"
    r"|(?P<auto><(?P<autohref>https?://[^>\s]+)>)"
    r"|(?P<strong>\*\*(?P<strongtext>(?!\s).+?(?<!\s))\*\*)"
    r"|(?P<em>(?<![\w*])\*(?P<emtext>(?!\s)[^*]+?(?<!\s))\*(?![\w*])|(?<!\w)_(?P<emtext2>(?!\s)[^_]+?(?<!\s))_(?!\w))"
)
_SAFE_HREF = re.compile(r"^(https?://|mailto:|#|\.{0,2}/|[\w][\w./-]*(#[\w-]*)?$)", re.I)


def safe_href(href: str) -> bool:
    """Links may go to the web, to an anchor or to a relative path; never `javascript:` and the like."""
    return bool(_SAFE_HREF.match(href)) and not re.match(r"^\s*(javascript|data|vbscript):", href, re.I)


def render_inline(text: str, links: bool = True) -> Markup:
    """Inline Markdown (code, links, bold, emphasis, backslash escapes) as escaped HTML.

    links=False for text that may carry trace strings (a finding's fix): links stay plain text.
    """
    out, pos = [], 0
    for m in _INLINE.finditer(text):
        out.append(escape(text[pos:m.start()]))
        pos = m.end()
        if m.group("esc"):
            out.append(escape(m.group("esc")[1]))
        elif m.group("code"):
            out.append(Markup("<code>%s</code>") % m.group("codetext").strip())
        elif m.group("link") and not links:
            out.append(escape(m.group("link")))
        elif m.group("link"):
            href, label = m.group("href"), render_inline(m.group("label"))
            out.append(Markup('<a href="%s">%s</a>') % (href, label) if safe_href(href)
                       else label + escape(f" ({href})"))
        elif m.group("auto") and not links:
            out.append(escape(m.group("auto")))
        elif m.group("auto"):
            out.append(Markup('<a href="%s">%s</a>') % (m.group("autohref"), m.group("autohref")))
        elif m.group("strong"):
            out.append(Markup("<strong>%s</strong>") % render_inline(m.group("strongtext"), links))
        else:
            out.append(Markup("<em>%s</em>") % render_inline(m.group("emtext") or m.group("emtext2"), links))
    out.append(escape(text[pos:]))
    return Markup("").join(out)


_LIST_ITEM = re.compile(r"^( {0,3})([-*+]|\d{1,9}[.)])(\s+|$)")
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_HR = re.compile(r"^ {0,3}([-*_])( *\1){2,}\s*$")
_TABLE_SEP = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")


def _starts_block(line: str) -> bool:
    return bool(fence_marker(line) or _HEADING.match(line) or _LIST_ITEM.match(line) or _HR.match(line)
                or line.lstrip().startswith(">"))


def _cells(line: str) -> list[str]:
    """A table row's cells; a `|` inside a code span or escaped as `\\|` does not split."""
    line = line.strip()
    line = line[1:] if line.startswith("|") else line
    line = line[:-1] if line.endswith("|") and not line.endswith("\\|") else line
    cells, cur, in_code, prev = [], [], False, ""
    for ch in line:
        if ch == "`":
            in_code = not in_code
        if ch == "|" and not in_code and prev != "\\":
            cells.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
        prev = ch
    cells.append("".join(cur).strip())
    return cells


def render_markdown(text: str, heading_offset: int = 0) -> Markup:
    """Block Markdown as escaped HTML; `heading_offset` demotes headings (## -> h2 + offset)."""
    lines = (text or "").expandtabs(4).splitlines()
    out: list[Markup] = []
    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        fence = fence_marker(line)
        if fence:
            indent = len(line) - len(line.lstrip(" "))
            lang = re.sub(r"[^\w+-]", "", line.strip()[len(fence):].strip().split(" ")[0])
            body, i = [], i + 1
            while i < n:
                f2 = fence_marker(lines[i])
                if f2 and f2[0] == fence[0] and len(f2) >= len(fence) and not lines[i].strip()[len(f2):].strip():
                    i += 1
                    break
                body.append(lines[i][indent:] if not lines[i][:indent].strip() else lines[i].lstrip(" "))
                i += 1
            cls = Markup(' class="language-%s"') % lang if lang else Markup("")
            out.append(Markup("<pre><code%s>%s</code></pre>") % (cls, "\n".join(body)))
            continue
        heading = _HEADING.match(line)
        if heading:
            level = min(6, len(heading.group(1)) + heading_offset)
            out.append(Markup("<h%d>%s</h%d>") % (level, render_inline(heading.group(2)), level))
            i += 1
            continue
        if _HR.match(line):
            out.append(Markup("<hr>"))
            i += 1
            continue
        if line.lstrip().startswith(">"):
            quoted = []
            while i < n and lines[i].lstrip().startswith(">"):
                quoted.append(re.sub(r"^\s*> ?", "", lines[i]))
                i += 1
            out.append(Markup("<blockquote>%s</blockquote>") % render_markdown("\n".join(quoted), heading_offset))
            continue
        if "|" in line and i + 1 < n and _TABLE_SEP.match(lines[i + 1]):
            head, i = _cells(line), i + 2
            rows = []
            while i < n and lines[i].strip() and "|" in lines[i]:
                rows.append(_cells(lines[i]))
                i += 1
            th = Markup("").join(Markup("<th>%s</th>") % render_inline(c) for c in head)
            body = Markup("").join(
                Markup("<tr>%s</tr>") % Markup("").join(Markup("<td>%s</td>") % render_inline(c) for c in r)
                for r in rows)
            out.append(Markup("<table><thead><tr>%s</tr></thead><tbody>%s</tbody></table>") % (th, body))
            continue
        item = _LIST_ITEM.match(line)
        if item:
            html, i = _list(lines, i, heading_offset)
            out.append(html)
            continue
        para = [line.strip()]
        i += 1
        while i < n and lines[i].strip() and not _starts_block(lines[i]):
            para.append(lines[i].strip())
            i += 1
        out.append(Markup("<p>%s</p>") % render_inline(" ".join(para)))
    return Markup("\n").join(out)


def _list(lines: list[str], i: int, heading_offset: int) -> tuple[Markup, int]:
    """A (possibly nested) list starting at lines[i]; items hold blocks indented under their marker."""
    first = _LIST_ITEM.match(lines[i])
    ordered = first.group(2)[0].isdigit()
    base = len(first.group(1))
    items: list[list[str]] = []
    n = len(lines)
    while i < n:
        m = _LIST_ITEM.match(lines[i])
        if not m or len(m.group(1)) != base or m.group(2)[0].isdigit() != ordered:
            break
        content_indent = m.end(2) + min(len(m.group(3)), 4) if m.group(3) else m.end(2) + 1
        body = [lines[i][m.end():]]
        i += 1
        while i < n:
            line = lines[i]
            indent = len(line) - len(line.lstrip(" "))
            if not line.strip():
                nxt = next((lines[j] for j in range(i + 1, n) if lines[j].strip()), None)
                if nxt is None or (len(nxt) - len(nxt.lstrip(" ")) < content_indent):
                    break
                body.append("")
            elif indent >= content_indent:
                body.append(line[content_indent:])
            elif _starts_block(line) or indent < base:
                break
            else:  # lazy continuation of the item's paragraph
                body.append(line.strip())
            i += 1
        items.append(body)
        while i < n and not lines[i].strip():
            nxt = next((lines[j] for j in range(i + 1, n) if lines[j].strip()), "")
            nm = _LIST_ITEM.match(nxt)
            if nm and len(nm.group(1)) == base:
                i += 1
            else:
                break
    start = ""
    if ordered and first.group(2)[:-1] != "1":
        start = Markup(' start="%d"') % int(first.group(2)[:-1])
    lis = Markup("").join(Markup("<li>%s</li>") % render_markdown("\n".join(b), heading_offset) for b in items)
    tag = "ol" if ordered else "ul"
    return Markup("<%s%s>%s</%s>") % (Markup(tag), start, lis, Markup(tag)), i
