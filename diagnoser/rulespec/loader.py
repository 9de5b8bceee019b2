"""Load rule YAML -> validated Rule objects, with file:line in every error.

Errors are RuleError("file:line: what is wrong; what to add"). Here: the YAML parse (libyaml), the
JSON Schema, unique ids, shared conditions, --param overrides and finding references without
cycles; the per-rule semantic checks (named thresholds, known facts and names) are in checks.py.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Iterable

from ..errors import RuleError
from . import cache
from .checks import check_rule, line_for as _line_for
from .model import Condition, Rule, RulePack, Variant
from .values import sanitize


class _LazyYaml:
    """PyYAML, imported where YAML is first parsed: a rule pack read from its cache needs none (start-up)."""

    def __getattr__(self, name):
        import yaml as module
        globals()["yaml"] = module
        return getattr(module, name)


yaml = _LazyYaml()


def _yaml_loader():
    """libyaml's C parser where PyYAML was built with it (5-10x faster), the pure-Python one otherwise."""
    return getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader
_VALIDATOR = None


def _validator():
    """The JSON Schema validator, built on first use (jsonschema costs ~70 ms to import)."""
    global _VALIDATOR
    if _VALIDATOR is None:
        import jsonschema

        from .schema import RULE_FILE
        _VALIDATOR = jsonschema.Draft202012Validator(RULE_FILE)
    return _VALIDATOR


def _line_map(node, path=(), out=None) -> dict[tuple, int]:
    """Map every YAML path (tuple of keys / indices) to its 1-based line."""
    out = {} if out is None else out
    out[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            key = k.value
            out[path + (key,)] = k.start_mark.line + 1
            _line_map(v, path + (key,), out)
            out[path + (key,)] = k.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            _line_map(v, path + (i,), out)
    return out


def read_text(path: Path) -> str:
    """A rule file's text; one-line RuleError for unreadable, binary or gzipped files."""
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise RuleError(path, None, f"cannot read: {e.strerror}") from None
    if raw[:2] == b"\x1f\x8b":
        raise RuleError(path, None, "is gzip-compressed; a rule file is plain YAML text (gunzip it first)")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise RuleError(path, line, "is not UTF-8 text; a rule file is plain YAML (is this a trace or a binary?)") from None


def read_yaml(path: Path, text: str | None = None) -> tuple[Any, dict[tuple, int]]:
    text = read_text(path) if text is None else text
    try:
        node = yaml.compose(text, Loader=_yaml_loader())
        data = yaml.load(text, Loader=_yaml_loader())  # noqa: S506 - a SafeLoader (C or Python)
    except yaml.YAMLError:
        node, data = _python_yaml(path, text)  # the pure-Python parser words its errors better
    return data, (_line_map(node) if node is not None else {})


def _python_yaml(path: Path, text: str):
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader), yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        hint = " (check the indentation: nested keys need more spaces than their parent)" if "indent" in str(problem) or "mapping values" in str(problem) or "expected <block end>" in str(problem) else ""
        raise RuleError(path, mark.line + 1 if mark else None, f"YAML syntax error: {problem}{hint}") from None


def load_rule_file(path: Path, known_facts: dict | None = None, shipped: bool = False) -> list[Rule]:
    """Rules of one file, validated; `{condition: NAME}` from the conditions of its folder's rule
    files (its pack) and its own."""
    path = Path(path)
    data = file_data(path)
    shared = {}
    for other in rule_files(path.parent) if path.parent.is_dir() else []:
        if other.resolve() != path.resolve():
            try:
                shared.update({n: (c, str(other)) for n, c in file_data(other)["conditions"].items()})
            except RuleError:
                continue  # a broken neighbour is its own error, reported when it is loaded
    shared.update({name: (c, str(path)) for name, c in data["conditions"].items()})
    pack_params = {}
    for other in rule_files(path.parent) if path.parent.is_dir() else []:
        if other.resolve() != path.resolve():
            try:
                pack_params.update(_file_params(other, file_data(other)))
            except RuleError:
                continue
    pack_params.update(_file_params(path, data))
    return build_rules(path, data, shared, known_facts, shipped, pack_params)


def _file_params(path: Path, data: dict) -> dict:
    """A file's pack params as {name: (value, file, line)}."""
    return {name: (value, str(path), line) for name, (value, line) in data.get("params", {}).items()}


def file_data(path: Path) -> dict:
    """A rule file parsed and checked against the schema, as plain JSON data:
    {"rules": [[raw, tree, line]...], "conditions": {name: {"params", "when", "line"}}, "settings": {name: [value, line]},
    "params": {name: [value, line]}} (pack params).

    Files seen before (same bytes, same loader) come from the compiled-pack cache, without the
    YAML parse and the schema checks that cost most of the start-up."""
    text = read_text(path)
    key = cache.key(text, None)
    hit = cache.get(key)
    if hit is not None and {"rules", "conditions", "settings", "params"} <= set(hit):
        return hit
    data, lines = read_yaml(path, text)
    if not isinstance(data, dict):
        raise RuleError(path, 1, "a rule file is a mapping with `tree:` and `rules:` (a list of rules)")
    errors = sorted(_validator().iter_errors(data), key=lambda e: (_line_for(lines, e.absolute_path) or 0, str(e.absolute_path)))
    if errors:
        from .schema import advice
        err = _deepest(errors[0])
        raise RuleError(path, _line_for(lines, err.absolute_path), advice(err))
    file_tree = data.get("tree")
    entries, seen = [], {}
    for i, raw in [(i, one) for i, many in enumerate(data.get("rules") or []) for one in per_workload(many)]:
        line = _line_for(lines, ("rules", i))
        tree = raw.get("tree", file_tree)
        if not tree:
            raise RuleError(path, line, f"rule {raw['id']}: no tree; add `tree:` to the file or the rule")
        if raw["id"] in seen:
            raise RuleError(path, line, f"duplicate id {raw['id']} (first at line {seen[raw['id']]}); ids are never reused")
        seen[raw["id"]] = line
        entries.append([raw, tree, line or 0])
    conditions = {name: {"params": c.get("params") or {}, "when": c["when"],
                         "line": _line_for(lines, ("conditions", name)) or 0}
                  for name, c in (data.get("conditions") or {}).items()}
    settings = {name: [value, _line_for(lines, ("settings", name)) or 0]
                for name, value in (data.get("settings") or {}).items()}
    params = {name: [value, _line_for(lines, ("params", name)) or 0] for name, value in (data.get("params") or {}).items()}
    out = {"rules": entries, "conditions": conditions, "settings": settings, "params": params}
    cache.put(key, out)
    return out


def per_workload(raw: dict) -> list[dict]:
    """A rule as the engine sees it: one, or, for `ids: {training: A, inference: B}`, one per workload
    with its id, `when` guarded by `workload_kind` (first in `all`) and its `for_workload` keys applied
    (docs/rules.md, One rule for training and inference)."""
    if "ids" not in raw:
        return [raw]
    out = []
    for workload, rid in raw["ids"].items():
        one = {k: v for k, v in raw.items() if k not in ("ids", "for_workload")}
        one.update((raw.get("for_workload") or {}).get(workload, {}))
        guard = {"fact": "workload_kind", "op": "eq", "value": workload}
        when = raw["when"]
        one["when"] = {"all": [guard] + list(when["all"])} if set(when) == {"all"} else {"all": [guard, when]}
        out.append({"id": rid, **one})
    return out


def build_rules(path: Path, data: dict, shared: dict, known_facts: dict | None, shipped: bool,
                pack_params: dict | None = None) -> list[Rule]:
    """Rule objects from a file's data, `{condition: NAME}` resolved from `shared`
    ({name: (condition data, file)}), the pack params a rule names but does not set from `pack_params`
    ({name: (value, file, line)}), each rule checked (names, params, templates, regexes)."""
    rules = []
    for i, (raw, tree, line) in enumerate(data["rules"]):
        rule = _rule(raw, tree, path, line, shipped, shared, pack_params)
        try:
            check_rule(rule, path, {}, i, known_facts)
        except RuleError:
            check_rule(rule, path, read_yaml(path)[1], i, known_facts)  # again, for the exact line
            raise
        rules.append(rule)
    return rules


def file_settings(path: Path, data: dict, known: Callable[[], dict] | None = None) -> dict:
    """The analysis settings a rule file sets (`settings:`), checked against `known()` (else the settings
    registered so far)."""
    out = {}
    for name, (value, line) in data["settings"].items():
        from .. import settings as settings_mod
        from ..errors import DiagnoserError
        try:
            out[name] = settings_mod.checked(name, value, "settings", settings_mod.registered() if known is None else known())
        except DiagnoserError as e:
            raise RuleError(path, line or None, str(e)) from None
    return out


def _named(raw: dict, conditions: Iterable[Condition]) -> set[str]:
    """Every name a rule reads that a param could fill: `param:` of when / verify_check / not_applicable,
    the fields of its texts (variants too) and the names of its gain expression."""
    from .expr import ExprError, parse_expr, template_fields
    names = set().union(*(c.params() for c in conditions)) | {c["param"] for c in raw.get("verify_check", ()) if c.get("param")}
    texts = [raw.get(k) for k in ("title", "message", "fix", "verify")]
    texts += [v.get(k) for v in raw.get("variants", ()) for k in ("title", "message", "fix", "verify")]
    for text in texts:
        if isinstance(text, str):
            try:
                names |= set(template_fields(text))
            except ValueError:
                pass  # a bad template is check_rule's error
    if raw.get("estimated_gain") is not None:
        try:
            names |= set(parse_expr(str(raw["estimated_gain"])))
        except ExprError:
            pass
    return names


def _rule(raw: dict, tree: str, path: Path, line: int, shipped: bool, shared: dict | None = None,
          pack_params: dict | None = None) -> Rule:
    used: list[str] = []
    when = _condition(raw["when"], shared or {}, used, path, line)
    params = dict(raw.get("params", {}))
    for name in dict.fromkeys(used):
        cond, where = shared[name]
        for k, v in cond["params"].items():
            if k in raw.get("params", {}):
                raise RuleError(path, line, f"rule {raw['id']}: param `{k}` is set by condition `{name}` "
                                            f"({where}:{cond['line']}); tune it there (or with --param {raw['id']}.{k}=V)")
            params.setdefault(k, v)
    not_applicable = None if "not_applicable" not in raw else (
        _condition(raw["not_applicable"]["when"], shared or {}, [], path, line), str(raw["not_applicable"]["reason"]))
    inherited = {}
    if pack_params:  # a pack param fills each name the rule reads and does not set itself (nor its conditions)
        for k in sorted(_named(raw, [when] + ([not_applicable[0]] if not_applicable else [])) - set(params)):
            if k in pack_params:
                params[k] = pack_params[k][0]
                inherited[k] = f"{pack_params[k][1]}:{pack_params[k][2]}"
    extra = {}
    if used:
        extra["conditions"] = list(dict.fromkeys(used))
    if inherited:
        extra["pack_params"] = inherited
    return Rule(
        id=raw["id"], name=raw["name"], title=raw["title"], tree=tree, category=raw["category"],
        severity=raw["severity"], status=raw.get("status", "stable"), scope=raw.get("scope", "run"),
        requires=tuple(raw.get("requires", ())), params=params,
        when=when, message=raw["message"], evidence=tuple(raw.get("evidence", ())),
        estimated_gain=None if raw.get("estimated_gain") is None else str(raw["estimated_gain"]),
        gain_of=raw.get("gain_of", "step time"), fix=raw["fix"], verify=raw["verify"],
        refs=tuple(raw.get("refs", ())), verify_check=tuple(_condition(c) for c in raw.get("verify_check", ())),
        not_applicable=not_applicable,
        variants=tuple(_variant(v) for v in raw.get("variants", ())),
        path=str(path), line=line or 0, shipped=shipped,
        extra=extra,
    )


def _variant(raw: dict) -> Variant:
    select = tuple((fact, tuple(v) if isinstance(v, list) else (v,)) for fact, v in raw["for"].items())
    return Variant(select, raw.get("title"), raw.get("message"), raw.get("fix"), raw.get("verify"),
                   tuple(raw["refs"]) if "refs" in raw else None)


_BRANCH = {"fact": 0, "op": 0, "finding": 1, "all": 2, "any": 3, "none": 4, "condition": 5}


def _deepest(error):
    """For oneOf failures, follow the branch the author evidently meant (by its keys) down to the real error."""
    while error.validator == "oneOf" and error.context and isinstance(error.instance, dict):
        keys = [k for k in error.instance if k in _BRANCH]
        if not keys:
            return error
        branch = _BRANCH[keys[0]]
        inner = [e for e in error.context if e.schema_path and e.schema_path[0] == branch]
        if not inner:
            return error
        error = max(inner, key=lambda e: len(e.absolute_path))
    return error


def _condition(raw: dict, shared: dict | None = None, used: list | None = None, path=None, line=None,
               depth: int = 0) -> Condition:
    """A `when` node; `{condition: NAME}` becomes `all` of the shared condition's tree (named in `used`)."""
    shared = shared or {}
    used = [] if used is None else used
    for key in ("all", "any", "none"):
        if key in raw:
            return Condition(kind=key, items=tuple(_condition(c, shared, used, path, line, depth) for c in raw[key]))
    if "condition" in raw:
        name = raw["condition"]
        if name not in shared:
            known = ", ".join(sorted(shared)) or "none"
            raise RuleError(path, line, f"`condition: {name}` names no shared condition (known: {known}); "
                                        f"define it under `conditions:` in a rule file of the pack")
        if depth > 8:
            raise RuleError(path, line, f"conditions nest too deeply at `{name}` (a condition using itself?)")
        used.append(name)
        return Condition(kind="all", items=(_condition(shared[name][0]["when"], shared, used, path, line, depth + 1),),
                         label=name)
    if "finding" in raw:
        return Condition(kind="finding", finding=raw["finding"])
    value = raw.get("value")
    if isinstance(value, list):
        value = tuple(value)
    return Condition(kind="fact", fact=raw["fact"], op=raw["op"], value=value, param=raw.get("param"))


def rule_files(path: Path) -> list[Path]:
    path = Path(path)
    if path.is_dir():
        return sorted(p for p in path.glob("*.yaml") if not p.name.endswith(".test.yaml"))
    if not path.exists():
        raise RuleError(path, None, "no such rule file or folder")
    return [path]


def build_pack(shipped_dir: Path | None, user_paths: Iterable[Path] = (), overrides: Iterable[str] = (),
               known_facts: dict | None = None, known_settings: Callable[[], dict] | None = None) -> RulePack:
    """Shipped rules, then user packs (a user rule with a shipped id replaces it), then --param overrides.
    `known_facts`: the catalogue's facts that conditions are checked against; `known_settings`: the function
    that lists every setting (diagnoser.catalogue.all_settings: it imports the analyses, so it is called
    only for a file that sets some), else the settings registered so far.

    `conditions:` of every file in the pack are shared: a rule anywhere may use `{condition: NAME}`
    (a user pack's condition replaces a shipped one of the same name); a user rule file given alone
    also brings the conditions of the rule files in its folder, as load_rule_file does. The pack records how it was
    made (RulePack.provenance): each user pack with the rules it adds and the shipped ones it
    replaces, each --param with its default, and pack settings.
    """
    user_paths, overrides = list(user_paths), list(overrides)
    key = None
    if shipped_dir is not None and not user_paths and not overrides:  # the shipped pack alone: built once, kept
        files = rule_files(shipped_dir)
        key = cache.pack_key(str(shipped_dir), [(p.name, read_text(p)) for p in files],
                             None if known_facts is None else list(known_facts))
        hit = cache.get_pack(key)
        if hit is not None:
            return hit
    rules: dict[str, Rule] = {}
    trees: dict[str, str] = {}
    sources = [(p, True, None) for p in (rule_files(shipped_dir) if shipped_dir else [])]
    neighbours: dict[Path, Path] = {}
    for up in user_paths:
        sources += [(p, False, str(up)) for p in rule_files(Path(up))]
        if Path(up).is_file():  # a single rule file brings the shared conditions of its folder's rule files
            neighbours.update({p.resolve(): p for p in rule_files(Path(up).parent)})
    loaded = [(file, shipped, given, file_data(file)) for file, shipped, given in sources]
    shared: dict[str, tuple[dict, str]] = {}
    origin: dict[str, bool] = {}
    for file, shipped, _, data in loaded:
        for name, cond in data["conditions"].items():
            if name in shared and origin[name] == shipped:
                raise RuleError(file, cond["line"] or None, f"condition `{name}` is also defined in {shared[name][1]}")
            shared[name], origin[name] = (cond, str(file)), shipped
    given = {f.resolve() for f, shipped, _, _ in loaded if not shipped}
    for resolved in sorted(set(neighbours) - given):  # as a user pack's, below those of the files given
        try:
            conditions = file_data(neighbours[resolved])["conditions"]
        except RuleError:
            continue  # a broken neighbour is its own error, reported when it is loaded
        for name, cond in conditions.items():
            if origin.get(name, True):
                shared[name], origin[name] = (cond, str(neighbours[resolved])), False
    pack_params: dict[str, tuple] = {}  # {name: (value, file, line)}: a user pack's replaces a shipped one
    param_origin: dict[str, bool] = {}
    for file, shipped, _, data in loaded:
        for name, entry in _file_params(file, data).items():
            if name in pack_params and param_origin[name] == shipped:
                raise RuleError(file, entry[2] or None, f"pack param `{name}` is also set in {pack_params[name][1]}:{pack_params[name][2]}")
            pack_params[name], param_origin[name] = entry, shipped
    packs: dict[str, dict] = {}
    pack_settings: dict = {}
    for file, shipped, given, data in loaded:
        pack_settings.update(file_settings(file, data, known_settings))
        for rule in build_rules(file, data, shared, known_facts, shipped, pack_params):
            if rule.id in rules and rules[rule.id].shipped == shipped:
                raise RuleError(file, rule.line, f"duplicate id {rule.id} (also in {rules[rule.id].path}); ids are never reused")
            if given is not None:
                entry = packs.setdefault(given, {"path": given, "rules": [], "replaces": []})
                entry["rules"].append(rule.id)
                if rule.id in rules:
                    entry["replaces"].append(rule.id)
            rules[rule.id] = rule
            trees.setdefault(rule.tree, str(file))
    applied = []
    for item in overrides:
        applied.append(_apply_override(rules, item, shared, pack_params))
    for rid, rule in rules.items():  # the engine and every evaluator see the same (sanitized) thresholds
        rules[rid] = rule.with_params({k: sanitize(v) for k, v in rule.params.items() if sanitize(v) is not None})
    _check_references(rules)
    for entry in packs.values():
        entry["rules"].sort()
        entry["replaces"].sort()
    pack = RulePack(rules=rules, trees=trees, params=applied, packs=list(packs.values()), settings=pack_settings)
    if key is not None and not pack_settings:  # (settings are checked against every analysis's: not kept)
        cache.put_pack(key, pack)
    return pack


def _apply_override(rules: dict[str, Rule], item: str, shared: dict | None = None, pack_params: dict | None = None) -> dict:
    """`RULE.NAME=V` for one rule, `CONDITION.NAME=V` for every rule using that shared condition, or
    `NAME=V` for every rule that inherits the pack param NAME."""
    from ..errors import DiagnoserError
    p = re.fullmatch(r"([a-z][a-z0-9_]*)=(.*)", item.strip())
    if p and pack_params is not None:
        param, raw = p.groups()
        if param not in pack_params:
            raise DiagnoserError(f"--param {item!r}: no pack param {param} "
                                 f"(pack params: {', '.join(sorted(pack_params)) or 'none'}); for one rule write RULEID.{param}=VALUE")
        users = sorted(rid for rid, r in rules.items() if param in r.extra.get("pack_params", {}))
        for rid in users:
            _apply_override(rules, f"{rid}.{param}={raw}")
        return {"pack_param": param, "value": rules[users[0]].params[param] if users else yaml.safe_load(raw),
                "default": pack_params[param][0], "rules": users}
    c = re.fullmatch(r"([a-z][a-z0-9]*(?:-[a-z0-9]+)*)\.([a-z][a-z0-9_]*)=(.*)", item.strip())
    if c and shared and c.group(1) in shared:
        cond, param, raw = c.groups()
        defaults = dict(shared[cond][0]["params"])
        if param not in defaults and param in (pack_params or {}):  # a pack param its rules inherit
            defaults[param] = pack_params[param][0]
        if param not in defaults:
            raise DiagnoserError(f"--param {item!r}: condition {cond} has no param {param} "
                                 f"(it has: {', '.join(sorted(defaults)) or 'none'})")
        users = sorted(rid for rid, r in rules.items() if cond in r.extra.get("conditions", ()) and param in r.params)
        for rid in users:
            _apply_override(rules, f"{rid}.{param}={raw}")
        return {"condition": cond, "param": param, "value": rules[users[0]].params[param] if users else raw,
                "default": defaults[param], "rules": users}
    m = re.fullmatch(r"([A-Z][A-Z0-9]*[0-9]{3})\.([a-z][a-z0-9_]*)=(.*)", item.strip())
    if not m:
        raise DiagnoserError(f"--param {item!r}: expected RULEID.NAME=VALUE (e.g. TRAIN001.max_gpu_busy_pct=60) "
                             f"or CONDITION.NAME=VALUE for a shared condition or NAME=VALUE for a pack param")
    rid, name, raw = m.groups()
    if rid not in rules:
        raise DiagnoserError(f"--param {item!r}: no rule {rid}")
    if name not in rules[rid].params:
        raise DiagnoserError(f"--param {item!r}: rule {rid} has no param {name} (it has: {', '.join(sorted(rules[rid].params)) or 'none'})")
    value = yaml.safe_load(raw)
    old = rules[rid].params[name]
    if isinstance(old, (int, float)) and not isinstance(old, bool) and not isinstance(value, (int, float)):
        raise DiagnoserError(f"--param {item!r}: {name} is a number")
    rules[rid] = rules[rid].with_params({name: value})
    return {"rule": rid, "param": name, "value": value, "default": old}


def _check_references(rules: dict[str, Rule]) -> None:
    for rule in rules.values():
        for ref in sorted(rule.when.findings()):
            if ref not in rules:
                raise RuleError(rule.path, rule.line, f"rule {rule.id}: `finding: {ref}` names no known rule")
    order_layers(rules)


def order_layers(rules: dict[str, Rule]) -> list[list[str]]:
    """Group rule ids into layers: a rule runs after every rule whose finding it references."""
    deps = {rid: set(r.when.findings()) & set(rules) for rid, r in rules.items()}
    layers, done = [], set()
    while len(done) < len(rules):
        ready = sorted(rid for rid in rules if rid not in done and deps[rid] <= done)
        if not ready:
            cyc = sorted(rid for rid in rules if rid not in done)
            r = rules[cyc[0]]
            raise RuleError(r.path, r.line, f"finding references form a cycle among {', '.join(cyc)}")
        layers.append(ready)
        done.update(ready)
    return layers
