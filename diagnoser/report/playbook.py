"""Playbooks: parse `playbooks/*.md` into per-rule sections and render the HTML handbook.

A playbook file holds one tree's remediation text: `# Title`, an intro, then one section per rule
(`## RULEID name`, with `### Meaning`, `### Evidence`, `### Fix`, `### Verify`). The text is rendered
by the Markdown subset in markdown.py, which escapes every piece of text, so nothing in a playbook
or a rule can inject markup.
"""
from __future__ import annotations

import json
import re
import string
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError
from ..resources import playbooks_dir
from ..rulespec.model import SEVERITY_RANK, Condition, Rule, RulePack
from .formatting import fmt_value
from .markdown import fence_marker, render_inline, render_markdown, safe_href

RULE_HEADING = re.compile(r"^##\s+`?([A-Z][A-Z0-9]*[0-9]{3})`?(?![\w])[\s:.\-\u2013\u2014]*(.*?)\s*#*\s*$")
PART_NAMES = ("meaning", "evidence", "fix", "verify")
TREE_ORDER = ("train-slow", "inference-slow", "kernel", "oom")


# ------------------------------------------------------------------------------ parsing

@dataclass
class Section:
    """One rule's playbook text: Markdown source per `###` part (meaning, evidence, fix, verify...)."""

    rule: str | None  # None: a `##` heading after the first rule section that names no rule
    name: str
    path: str
    line: int
    parts: dict[str, str] = field(default_factory=dict)  # lower-cased part heading -> Markdown

    def part(self, name: str, params: dict | None = None) -> str:
        """The part's Markdown; with `params` (the rule's, as --param set them) its `{param}` numbers filled."""
        text = self.parts.get(name, "").strip()
        return fill_prose(text, params) if params else text


PARAM_REF = re.compile(r"\{([a-z][a-z0-9_]*)(?::([^{}]*))?\}")


def fill_prose(text: str, params: dict) -> str:
    """A playbook's `{param}` / `{param:spec}` filled from `params`; every other brace (code) left as it is."""
    def value(m):
        if m.group(1) not in params:
            return m.group(0)
        try:
            return format(params[m.group(1)], m.group(2) or "")
        except (ValueError, TypeError):
            return str(params[m.group(1)])
    return PARAM_REF.sub(value, text)


@dataclass
class Playbook:
    path: str
    title: str
    intro: str
    sections: list[Section]


def parse_playbook(text: str, path: str = "<playbook>") -> Playbook:
    """Split a playbook into its title, intro and rule sections (headings inside code fences ignored)."""
    title, intro, sections = "", [], []
    current: Section | None = None
    part, buf = "", []
    open_fence = None

    def flush():
        if current is not None:
            current.parts[part] = (current.parts.get(part, "") + "\n".join(buf)).strip("\n")

    for lineno, line in enumerate(text.splitlines(), 1):
        fence = fence_marker(line)
        if open_fence:
            if fence and fence[0] == open_fence[0] and len(fence) >= len(open_fence) and not line.strip()[len(fence):].strip():
                open_fence = None
            buf.append(line)
            continue
        if fence:
            open_fence = fence
            buf.append(line)
            continue
        if line.startswith("# ") and not title and current is None:
            title = line[2:].strip().strip("#").strip()
            continue
        m = RULE_HEADING.match(line)
        if m or (line.startswith("## ") and current is not None):
            flush() if current is not None else intro.extend(buf)
            rule, name = (m.group(1), m.group(2).strip("` ")) if m else (None, line[3:].strip())
            current = Section(rule, name, path, lineno)
            sections.append(current)
            part, buf = "", []
            continue
        h3 = re.match(r"^###\s+(.+?)\s*#*\s*$", line)
        if h3 and current is not None:
            flush()
            part, buf = h3.group(1).strip().lower(), []
            continue
        buf.append(line)
    if current is None:
        intro.extend(buf)
    else:
        flush()
    return Playbook(path, title, "\n".join(intro).strip("\n"), sections)


def load_playbooks(directory: Path | None = None) -> dict[str, Playbook]:
    """Every `*.md` playbook in `directory` (default: the shipped playbooks), keyed by file stem."""
    directory = Path(directory) if directory else playbooks_dir()
    if not directory.is_dir():
        return {}
    return {p.stem: parse_playbook(p.read_text(encoding="utf-8"), str(p)) for p in sorted(directory.glob("*.md"))}


def read_playbook(path: Path) -> Playbook:
    """One playbook file, parsed; a file that is not UTF-8 text is a one-line error naming it."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(path, "is not UTF-8 text; a playbook is Markdown") from None
    except OSError as e:
        raise InputError(path, f"cannot read the playbook: {e.strerror}") from None
    return parse_playbook(text, str(path))


def sections_by_rule(books: dict[str, Playbook]) -> dict[str, Section]:
    """Rule id -> its section (the first one, if a rule is documented twice)."""
    out: dict[str, Section] = {}
    for book in books.values():
        for s in book.sections:
            if s.rule:
                out.setdefault(s.rule, s)
    return out


class PlaybookLibrary:
    """Where every view (`diagnose playbook ID`, the handbook, the HTML report) finds a rule's section.

    A user rule's: the playbook beside its own rule file (`my_rules/team.md` for `my_rules/team.yaml`),
    then those beside the other user rule files; failing those (a user rule that replaces a shipped id
    and brings no section), the shipped one. A shipped rule's: the shipped playbooks. Each file is read
    once, when a section is first looked for in it, so a view reads only the playbooks it needs.
    """

    def __init__(self, rule_files: dict[str, str] | None = None, directory: Path | None = None):
        self.rule_files = dict(rule_files or {})  # user rule id -> its rule file
        self.directory = directory  # the shipped playbooks (default: the package's)
        self._user: dict[str, Playbook | None] = {}
        self._shipped: dict[str, Playbook] | None = None
        self._shipped_sections: dict[str, Section] | None = None

    @classmethod
    def of_pack(cls, pack: RulePack, directory: Path | None = None) -> "PlaybookLibrary":
        return cls({rid: r.path for rid, r in pack.rules.items() if not r.shipped}, directory)

    def shipped_books(self) -> dict[str, Playbook]:
        if self._shipped is None:
            self._shipped = load_playbooks(self.directory)
        return self._shipped

    def user_book(self, rule_file: str) -> Playbook | None:
        """The playbook beside a user rule file (None: there is none)."""
        md = Path(rule_file).with_suffix(".md")
        key = str(md)
        if key not in self._user:
            self._user[key] = read_playbook(md) if md.is_file() else None
        return self._user[key]

    def user_section(self, rule_id: str) -> Section | None:
        own = self.rule_files.get(rule_id)
        if own is None:
            return None
        for rule_file in [own] + sorted(set(self.rule_files.values()) - {own}, key=Path):
            book = self.user_book(rule_file)
            found = next((s for s in book.sections if s.rule == rule_id), None) if book else None
            if found:
                return found
        return None

    def section(self, rule_id: str) -> Section | None:
        if self._shipped_sections is None:
            self._shipped_sections = sections_by_rule(self.shipped_books())
        return self.user_section(rule_id) or self._shipped_sections.get(rule_id)

    def tree_book(self, tree: str, rule_files: list[str]) -> Playbook | None:
        """The playbook whose `# Title` and intro head `tree` in the handbook: the shipped tree's, else
        the first of the tree's user rule files' playbooks that has a title or an intro."""
        book = self.shipped_books().get(tree_file(tree))
        if book:
            return book
        for rule_file in rule_files:
            book = self.user_book(rule_file)
            if book and (book.title or book.intro.strip()):
                return book
        return None


# ------------------------------------------------------------------------------ rules in words

OP_WORDS = {"lt": "<", "lte": "\u2264", "gt": ">", "gte": "\u2265", "eq": "=", "neq": "\u2260"}


def _literal(value) -> str:
    if isinstance(value, (bool, str)) or value is None:
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(_literal(v) for v in value)
    return fmt_value(value)


def describe_condition(cond: Condition, params: dict, titles: dict | None = None) -> dict:
    """A `when` tree in words: {"text", "ref" (a rule id or None), "items": [...]} per node."""
    titles = titles or {}
    if cond.kind in ("all", "any", "none"):
        if not cond.items:
            return {"text": "always" if cond.kind in ("all", "none") else "never", "ref": None, "items": []}
        items = [describe_condition(c, params, titles) for c in cond.items]
        if cond.label and len(items) == 1:  # a shared condition: its name, then what it tests
            inner = items[0]
            text = f"shared condition {cond.label}" + (f", {inner['text']}" if inner["items"] else f": {inner['text']}")
            return {"text": text, "ref": inner["ref"], "items": inner["items"], "kind": inner.get("kind", "all"),
                    "label": cond.label}
        return {"text": {"all": "all of:", "any": "any of:", "none": "none of:"}[cond.kind], "ref": None,
                "items": items, "kind": cond.kind}
    if cond.kind == "finding":
        title = titles.get(cond.finding)
        text = f"{cond.finding} fired" + (f" ({title})" if title else "")
        return {"text": text, "ref": cond.finding, "items": []}
    return {"text": fact_condition_text(cond, params), "ref": None, "items": []}


def fact_condition_text(cond: Condition, params: dict) -> str:
    """One fact test in words, with the threshold in force and its param name: `x < 70 (max_x)`."""
    if cond.op == "exists":
        return f"{cond.fact} is measured"
    value = params.get(cond.param, cond.value) if cond.param else cond.value
    named = f" ({cond.param})" if cond.param else ""
    if cond.op == "in":
        return f"{cond.fact} is one of {_literal(value)}{named}"
    if cond.op == "matches":
        return f"{cond.fact} matches /{value}/{named}"
    return f"{cond.fact} {OP_WORDS[cond.op]} {_literal(value)}{named}"


def condition_text(cond: Condition, params: dict) -> str:
    """The whole `when` tree on one line (for tests and plain-text use)."""
    node = describe_condition(cond, params)

    def flat(d):
        if not d["items"]:
            return d["text"]
        joiner = {"all": " and ", "any": " or ", "none": " or "}[d["kind"]]
        inner = joiner.join(f"({flat(x)})" if x["items"] and x.get("kind") != "none" else flat(x) for x in d["items"])
        inner = f"not ({inner})" if d["kind"] == "none" else inner
        return f"{d['label']}: ({inner})" if d.get("label") else inner

    return flat(node)


def fill_params(template: str, params: dict) -> str:
    """Fill a fix/verify template with the rule's params; facts stay as `{fact}` placeholders."""
    out = []
    try:
        parsed = list(string.Formatter().parse(template or ""))
    except ValueError:
        return template or ""
    for literal, name, spec, conv in parsed:
        out.append(literal)
        if name is None:
            continue
        if name in params:
            try:
                out.append(format(params[name], spec or ""))
            except (ValueError, TypeError):
                out.append(str(params[name]))
        else:
            out.append("{" + name + "}")
    return "".join(out)


# ------------------------------------------------------------------------------ the handbook

def tree_file(tree: str) -> str:
    return tree.replace("-", "_")


def _tree_key(tree: str):
    return (TREE_ORDER.index(tree), "") if tree in TREE_ORDER else (len(TREE_ORDER), tree)


def _rule_view(rule: Rule, section: Section | None, titles: dict) -> dict:
    def part(name: str):  # the part's Markdown rendered, its `{param}` numbers filled; None when empty
        md = section.part(name, rule.params) if section else ""
        return render_markdown(md, 3) if md else None

    return {
        "rule": rule,
        "anchor": rule.playbook_anchor,
        "severity_rank": SEVERITY_RANK[rule.severity],
        "has_section": section is not None,
        "summary": part(""),
        "meaning": part("meaning"),
        "evidence_md": part("evidence"),
        "fix": part("fix"),
        "verify": part("verify"),
        "rule_fix": render_inline(fill_params(rule.fix, rule.params)),
        "rule_verify": render_inline(fill_params(rule.verify, rule.params)),
        "extra_parts": [(name.capitalize(), render_markdown(fill_prose(md, rule.params), 3))
                        for name, md in (section.parts.items() if section else [])
                        if name and name not in PART_NAMES and md.strip()],
        "when": describe_condition(rule.when, rule.params, titles),
        "params": [(k, _literal(v)) for k, v in sorted(rule.params.items())],
        "refs": [(r, safe_href(r)) for r in rule.refs],
        "source": f"{Path(rule.path).name}:{rule.line}" if rule.shipped else f"{rule.path}:{rule.line}",
        "playbook": (f"{Path(section.path).name}:{section.line}" if section else None),
    }


def handbook_view(pack: RulePack, library: PlaybookLibrary | None = None) -> dict:
    """Everything the handbook template places: trees in order, each with its rules' views; a tree's
    title and intro come from its playbook (a user tree's: the playbook beside its rule file)."""
    library = library or PlaybookLibrary.of_pack(pack)
    titles = {rid: r.title for rid, r in pack.rules.items()}
    trees: dict[str, list[Rule]] = {}
    for rule in pack.ordered():
        trees.setdefault(rule.tree, []).append(rule)
    out = []
    for tree in sorted(trees, key=_tree_key):
        rules = [_rule_view(r, library.section(r.id), titles) for r in trees[tree]]
        first = pack.trees.get(tree)
        files = list(dict.fromkeys(([first] if first else []) + [r.path for r in trees[tree] if not r.shipped]))
        book = library.tree_book(tree, files)
        out.append({
            "tree": tree, "anchor": f"tree-{tree_file(tree)}",
            "title": render_inline(book.title) if book and book.title else tree,
            "intro": render_markdown(book.intro, 2) if book and book.intro.strip() else None,
            "rules": rules,
            "custom": not any(r.shipped for r in trees[tree]),
        })
    return {"trees": out, "count": len(pack.rules),
            "custom_count": sum(1 for r in pack.rules.values() if not r.shipped)}


def render_playbook_html(pack: RulePack, directory: Path | None = None) -> str:
    """The handbook of every rule in force (shipped + custom) as one self-contained HTML file."""
    from .._version import __version__
    from .template_env import template_env
    view = handbook_view(pack, PlaybookLibrary.of_pack(pack, directory))
    return template_env(True).get_template("playbook.html.j2").render(view=view, version=__version__)


def rule_playbook_markdown(pack: RulePack, rule_id: str) -> str:
    """One rule's playbook section as Markdown (`diagnose playbook RULE`): what it means, the
    evidence, the fix and how to verify, with the conditions and thresholds in force."""
    rule = pack.rules[rule_id]
    section = PlaybookLibrary.of_pack(pack).section(rule.id)
    lines = [f"# {rule.id} {rule.name}", "", f"**{rule.title}** · tree {rule.tree} · severity {rule.severity} · "
             f"category `{rule.category}`", ""]
    if section and section.part("", rule.params):
        lines += [section.part("", rule.params), ""]
    for part in PART_NAMES:
        text = section.part(part, rule.params) if section else ""
        if text:
            lines += [f"## {part.capitalize()}", "", text, ""]
    if not section:
        lines += ["## Fix", "", fill_params(rule.fix, rule.params), "", "## Verify", "",
                  fill_params(rule.verify, rule.params), ""]
    lines += ["## When it fires", "", condition_text(rule.when, rule.params), ""]
    if rule.needs():
        lines += [f"Needs: {', '.join(rule.needs())} (absent: the rule is listed as not evaluated).", ""]
    source = f"{Path(rule.path).name}:{rule.line}" if rule.shipped else f"{rule.path}:{rule.line}"
    where = f"; playbook {Path(section.path).name}:{section.line}" if section else "; no playbook section"
    lines += [f"Rule: {source}{where}. The whole handbook: `diagnose playbook -o playbooks.html`."]
    return "\n".join(lines) + "\n"
