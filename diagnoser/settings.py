"""Named analysis settings: the thresholds Python code uses to decide between findings.

Rule thresholds are rule params (`--param RULE.NAME=V`); thresholds that live in analysis or
ranking code are registered here once, with a default, a unit and a meaning, so they are
documented (`diagnose facts --catalogue`), overridable (`--set NAME=VALUE`, or `settings:` in a
rule pack) and echoed in the report when changed. A module declares its settings as module names,
as diagnoser/timeline/gaps.py does for `timeline.launch_gap_max_ns` (the default lives there only):

    GAP_MAX_NS = settings.register("family.name", DEFAULT, "unit", "what it decides")
    ...
    if gap_ns <= GAP_MAX_NS.value: ...

and reads `.value` where it decides (never a copy taken at import, so an override reaches it; the value
in force is the diagnosis's run context: diagnoser.run_context). A new module that declares one is listed
by diagnoser.catalogue.all_settings (its family's `settings`, or the list there), which collects them by
a call (declared_in); tests/test_cli_usage.py fails on one it does not reach.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import re
from dataclasses import dataclass
from types import ModuleType
from typing import Iterable, Iterator

from . import run_context
from .errors import DiagnoserError
from .run_context import Value

NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")

_REGISTRY: dict[str, "Setting"] = {}


@dataclass(frozen=True)
class Setting:
    """One named setting: `family.name`, its default, unit and what it decides."""

    name: str
    default: Value
    unit: str
    meaning: str

    @property
    def value(self) -> Value:
        """The value in force in this diagnosis (an override from --set or a rule pack, else the default):
        read from its run context (diagnoser.run_context), so each diagnosis sees its own."""
        return run_context.current().overrides.get(self.name, self.default)

    def to_json(self) -> dict:
        return {"name": self.name, "default": self.default, "unit": self.unit, "meaning": self.meaning}


def register(name: str, default: Value, unit: str, meaning: str) -> Setting:
    """Declare a setting (idempotent for the same declaration; a name is never declared twice)."""
    if not NAME.match(name):
        raise ValueError(f"setting name {name!r} must be family.name in lower case")
    setting = Setting(name, default, unit, meaning)
    old = _REGISTRY.get(name)
    if old is not None and old != setting:
        raise ValueError(f"setting {name} declared twice with different defaults or meanings")
    _REGISTRY[name] = setting
    return setting


def from_rule_param(condition: str, param: str) -> Value:
    """The default of a param of a shared rule condition (rules/shared.yaml): the default of a setting
    that restates the condition's threshold where an analysis decides (a note written where the rule
    stays silent), so the rule's param is its one source."""
    return _shared_conditions()[condition]["params"][param]


SHARED_FORMAT = "diagnoser.shared-conditions/1"


@functools.lru_cache(maxsize=1)
def _shared_conditions() -> dict:
    """rules/shared.yaml's `conditions:`, from the user cache when the file's bytes were seen before:
    the analyses' modules declare these settings as they are imported, and a YAML parse (PyYAML and
    the file: ~0.05 s of CPU) would be paid by every start, a small trace's included."""
    from . import disk_cache
    from ._version import __version__
    from .resources import rules_dir

    text = (rules_dir() / "shared.yaml").read_text(encoding="utf-8")
    key = hashlib.sha256(f"{SHARED_FORMAT} {__version__}\0{text}".encode()).hexdigest()[:40]
    hit = disk_cache.get("settings", SHARED_FORMAT, key)
    if hit is not None:
        return hit
    import yaml

    conditions = yaml.safe_load(text)["conditions"]
    try:
        kept = json.loads(json.dumps(conditions)) == conditions
    except (TypeError, ValueError):
        kept = False
    if kept:  # what JSON cannot hold as it is (dates, integer keys) is parsed on each start
        disk_cache.put("settings", SHARED_FORMAT, key, conditions)
    return conditions


def declared_in(modules: Iterable[ModuleType]) -> dict[str, Setting]:
    """The settings the `modules` declare (their Setting attributes), by name, sorted."""
    found = {v.name: v for m in modules for v in vars(m).values() if isinstance(v, Setting)}
    return dict(sorted(found.items()))


def registered() -> dict[str, Setting]:
    """The settings declared so far in this process (by the modules imported), by name: the rule loader's
    list when it is given none; diagnoser.catalogue.all_settings lists every one."""
    return dict(sorted(_REGISTRY.items()))


def parse_value(setting: Setting, raw: Value, origin: str) -> Value:
    """`raw` converted to the type of the setting's default; a clear one-line error otherwise."""
    default = setting.default
    text = str(raw).strip()
    try:
        if isinstance(default, bool):
            if isinstance(raw, bool):
                return raw
            if text.lower() in ("true", "yes", "1", "on"):
                return True
            if text.lower() in ("false", "no", "0", "off"):
                return False
            raise ValueError
        if isinstance(default, int):
            number = float(text.replace("_", ""))
            if number != int(number):
                raise ValueError
            return int(number)
        if isinstance(default, float):
            return float(text.replace("_", ""))
    except ValueError:
        kind = type(default).__name__.replace("bool", "true/false").replace("int", "whole number").replace("float", "number")
        raise DiagnoserError(f"{origin}: {setting.name} takes a {kind} (default {default} {setting.unit})".rstrip()) from None
    return text


def parse_assignments(items: Iterable[str], known: dict[str, Setting], origin: str = "--set") -> dict[str, Value]:
    """`NAME=VALUE` strings -> {name: typed value}, checked against `known` (catalogue.all_settings())."""
    out: dict[str, Value] = {}
    for item in items:
        name, sep, raw = str(item).partition("=")
        name = name.strip()
        if not sep or not name:
            raise DiagnoserError(f"{origin} {item!r}: expected NAME=VALUE, e.g. findings.warning_min_gain_pct=2")
        out[name] = checked(name, raw, f"{origin} {item!r}", known)
    return out


def checked(name: str, raw: Value, origin: str, known: dict[str, Setting]) -> Value:
    if name not in known:  # also a name that is no setting's shape (`nope`): said as unknown, with the nearest
        import difflib
        close = difflib.get_close_matches(name, list(known), n=1) or difflib.get_close_matches(
            name, [k.split(".", 1)[-1] for k in known], n=1)
        full = next((k for k in known if close and (k == close[0] or k.endswith("." + close[0]))), None)
        hint = f" (did you mean {full}?)" if full else ""
        raise DiagnoserError(f"{origin}: unknown setting {name}{hint}; "
                             "`diagnose facts --catalogue` lists them")
    return parse_value(known[name], raw, origin)


@contextlib.contextmanager
def overridden(values: dict[str, Value]) -> Iterator[None]:
    """Apply overrides for the duration of one diagnosis, in its run context only (the previous
    values back afterwards, even on error; another thread's diagnosis never sees them)."""
    with run_context.running(run_context.with_overrides(values)):
        yield


def current_overrides() -> dict[str, Value]:
    """The overrides in force, to hand to worker processes (a process pool or Dask workers do not
    share the run context): the worker runs its task under `overridden(values)`."""
    return dict(run_context.current().overrides)


def changed() -> list[dict]:
    """The settings now in force that differ from their defaults (for the report's settings)."""
    overrides = run_context.current().overrides
    out = []
    for name in sorted(overrides):
        setting = _REGISTRY.get(name)
        if setting is not None and overrides[name] != setting.default:
            out.append({"name": name, "value": overrides[name], "default": setting.default, "unit": setting.unit})
    return out
