"""Safe arithmetic for `estimated_gain` and safe formatting for message/verify templates."""
from __future__ import annotations

import ast
import functools
import math
import re
import string

_ALLOWED_FUNCS = {"min": min, "max": max, "abs": abs}


class ExprError(ValueError):
    pass


def parse_expr(text: str) -> frozenset[str]:
    """Validate an arithmetic expression; return the names it uses."""
    return _parse_expr(str(text))


@functools.lru_cache(maxsize=1024)
def _parse_expr(text: str) -> frozenset[str]:
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as e:
        raise ExprError(f"not an expression: {e.msg}") from None
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            if node.id not in _ALLOWED_FUNCS:
                names.add(node.id)
        elif isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in _ALLOWED_FUNCS or node.keywords:
                raise ExprError("only min(), max(), abs() may be called")
        elif not isinstance(node, (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Load,
                                   ast.Add, ast.Sub, ast.Mult, ast.Div, ast.USub, ast.UAdd)):
            raise ExprError(f"`{type(node).__name__}` is not allowed; use + - * / ( ) min max abs")
        if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float)):
            raise ExprError("only numbers may appear as constants")
    return frozenset(names)


def budget_names(text: str) -> frozenset[str]:
    return _budget_names(str(text))


@functools.lru_cache(maxsize=1024)
def _budget_names(text: str) -> frozenset[str]:
    """The names in the leftmost factor of a product: the share a gain expression explains.

    `(idle_sync_pct + idle_launch_pct) / 100 * f` -> {idle_sync_pct, idle_launch_pct};
    `kernel_time_share_pct / 100 * (100 - sm_pct) / 100` -> {kernel_time_share_pct}.
    """
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return frozenset()
    while isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div)):
        node = node.left
    return frozenset(n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id not in _ALLOWED_FUNCS)


@functools.lru_cache(maxsize=1024)
def _parsed(text: str) -> ast.Expression:
    return ast.parse(text, mode="eval")


def eval_expr(text: str, env: dict) -> float | None:
    """Evaluate; None when a name is missing or the result is not a finite number."""
    tree = _parsed(str(text))

    def ev(n):
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant):
            return float(n.value)
        if isinstance(n, ast.Name):
            v = env.get(n.id)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise KeyError(n.id)
            return float(v)
        if isinstance(n, ast.UnaryOp):
            v = ev(n.operand)
            return -v if isinstance(n.op, ast.USub) else v
        if isinstance(n, ast.BinOp):
            a, b = ev(n.left), ev(n.right)
            if isinstance(n.op, ast.Add):
                return a + b
            if isinstance(n.op, ast.Sub):
                return a - b
            if isinstance(n.op, ast.Mult):
                return a * b
            return a / b if b else math.inf
        if isinstance(n, ast.Call):
            return float(_ALLOWED_FUNCS[n.func.id](*[ev(a) for a in n.args]))
        raise KeyError(type(n).__name__)

    try:
        v = ev(tree)
    except (KeyError, TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def template_fields(template: str) -> frozenset[str]:
    """The names a message template reads (`{name:.1f}` -> name); ValueError for a field that is no name."""
    return _template_fields(template or "")


@functools.lru_cache(maxsize=4096)
def _template_fields(template: str) -> frozenset[str]:  # (a pack's load asks twice per text: its names, its checks)
    fields = set()
    for _, field, spec, _ in string.Formatter().parse(template):
        if field:
            root = field.split(".")[0].split("[")[0]
            if not root.isidentifier():
                raise ValueError(f"field `{field}` is not a name")
            fields.add(root)
    return frozenset(fields)


_ABSENT = "\x00"  # what an absent fact formats as, before the n/a clean-up below


class _Missing:
    def __format__(self, spec):
        return _ABSENT

    def __str__(self):
        return _ABSENT


class _SafeFormatter(string.Formatter):
    def get_value(self, key, args, kwargs):
        return kwargs.get(key, _Missing()) if isinstance(key, str) else _Missing()

    def format_field(self, value, spec):
        try:
            return super().format_field(value, spec)
        except (ValueError, TypeError):
            return str(value)


_OPTIONAL = re.compile(r"\[\[(.*?)\]\]", re.S)


def render_template(template: str, env: dict) -> str:
    """Format with facts/params; an `[[ ... ]]` segment is dropped when a name inside it is absent.
    What a value brings is made safe where it lands (_fill_in_context, docs/hostile_input.md)."""
    def optional(m):
        inner = m.group(1)
        return "" if any(f not in env for f in template_fields(inner)) else inner
    text = _OPTIONAL.sub(optional, template or "")
    return absent_as_na(_fill_in_context(text, env))


def _fill_in_context(text: str, env: dict) -> str:
    """str.format over a rule text (Markdown), each value placed for where it lands: on one line with
    control characters escaped; in prose with a lone backtick escaped; inside a code span that is a
    command line (text_safety.is_command) quoted so it stays one shell argument (inside `'...'` its
    quotes escaped); a code span whose values bring backticks gets a longer delimiter (code_span)."""
    from ..text_safety import code_span, is_command, open_quote, shell_fill, visible_line

    fmt = _SafeFormatter()
    out: list[str] = []
    span: list[str] | None = None  # the open code span's text so far
    for literal, field, spec, conversion in fmt.parse(text):
        for i, part in enumerate(literal.split("`")):
            if i:  # a backtick: opens or closes a code span
                if span is None:
                    span = []
                else:
                    out.append(code_span("".join(span)))
                    span = None
            (out if span is None else span).append(part)
        if field is None:
            continue
        obj, _ = fmt.get_field(field, (), env)
        if conversion:
            obj = fmt.convert_field(obj, conversion)
        value = fmt.format_field(obj, fmt.vformat(spec, (), env) if "{" in (spec or "") else spec)
        if not isinstance(obj, _Missing):  # (absent: absent_as_na turns it into n/a)
            value = visible_line(value)
            if span is None and value.count("`") % 2:  # a name's lone backtick opens no code span
                value = value.replace("`", "\\`")  # (a fact's own Markdown, `code` pairs, stays)
            elif span is not None and is_command("".join(span)):
                value = shell_fill(value, open_quote("".join(span)))
        (out if span is None else span).append(value)
    if span is not None:  # an unclosed backtick stays as written
        out.append("`" + "".join(span))
    return "".join(out)


_ABSENT_UNIT = re.compile(_ABSENT + r"(?:%|x\b| ?(?:ns|us|ms|s|B|KiB|MiB|GiB|GB/s|TB/s)\b)?")
_ABSENT_RUN = re.compile(_ABSENT + r"(?:[ ,/]+" + _ABSENT + ")+")


def absent_as_na(text: str) -> str:
    """Absent facts read as one `n/a`: their unit goes, and neighbours absent too merge into it
    ("top stall {reason} {share:.0f}%" with both absent -> "top stall n/a", not "n/a n/a%")."""
    text = _ABSENT_UNIT.sub(_ABSENT, text)
    text = _ABSENT_RUN.sub(_ABSENT, text)
    return text.replace(_ABSENT, "n/a")
