"""Every durable_rules call lives here, with its known traps worked around.

Traps handled (durable_rules 2.0.28, unmaintained since 2020):
- Ruleset names are global per process and cannot be re-registered: each evaluation registers a
  fresh uniquely named ruleset and deletes it afterwards.
- `durable.engine.Host` starts timer threads that run actions off the calling thread: we never
  create a Host; rulesets are driven directly and drained on the calling thread under a lock.
- A fact no rule matches raises MessageNotHandledException: a catch-all rule matches every record.
- Identical facts raise MessageObservedException and distinct ones can collide on hash; `id` is the
  identity and `sid` selects a session: every record gets a unique `id` and no `sid`.
- Floats with an exponent and no dot (1e-05), NaN and inf break its parser: we serialize the JSON
  ourselves with rulespec.values.format_number (values were sanitized there, once).
- `$mt` is its own regex dialect: regexes are evaluated in Python and passed as flag fields.
- `$nex` alone can hang and `$ex` is unreliable: presence and type are passed as flag fields.
- `$or` fires an action once per true branch: matches are de-duplicated.
- Exceptions inside actions are swallowed into state: actions only record (rule, record) pairs;
  anything unexpected is re-raised as EngineError after the drain.
- Joins where one fact satisfies both sides can segfault: rules are single-fact (no joins); rule
  chaining is done by evaluating in dependency layers with finding flags.
"""
from __future__ import annotations

import itertools
import json
from json.encoder import encode_basestring_ascii as _quoted  # what json.dumps(str) writes
import threading

from ..errors import EngineError
from ..rulespec.compile import CompiledRule
from ..rulespec.operators import KINDS, OPERATORS, value_kind
from ..rulespec.values import format_number

_LOCK = threading.Lock()
_COUNTER = itertools.count()
_TRUE = {"k__": "rec"}
_FALSE = {"k__": "never"}


def _import_engine():
    try:
        import durable_rules_engine as dre
        from durable import engine
    except ImportError as e:  # pragma: no cover - install problem
        raise EngineError(f"durable_rules is not importable ({e}); it needs Python 3.11 or 3.12 and a C compiler") from None
    return dre, engine


def _leaf(fact: str, op: str, value, negate: bool) -> dict:
    """A comparison leaf, or its negation, using presence/type flags instead of $ex/$nex: the
    operator's meaning (rulespec.operators) holds only between values of one kind."""
    if op not in OPERATORS or OPERATORS[op].form not in ("order", "equality"):
        raise EngineError(f"unknown comparison {op}")
    flag = f"{value_kind(value)}__{fact}"
    if OPERATORS[op].form == "order":
        if not negate:
            return {"$and": [{flag: True}, {f"${op}": {fact: value}}]}
        return {"$or": [{flag: False}, {f"${OPERATORS[op].negation}": {fact: value}}]}
    if op == "eq":
        pos = {"$and": [{flag: True}, {fact: value}]}
        neg = {"$or": [{flag: False}, {"$neq": {fact: value}}]}
        return neg if negate else pos
    # neq: present and not equal (of a different type counts as not equal)
    pos = {"$and": [{f"h__{fact}": True}, {"$or": [{flag: False}, {"$neq": {fact: value}}]}]}
    neg = {"$or": [{f"h__{fact}": False}, {"$and": [{flag: True}, {fact: value}]}]}
    return neg if negate else pos


def lower(pred: tuple, negate: bool = False) -> dict:
    """Engine-neutral predicate -> durable_rules JSON condition, negations pushed to the leaves."""
    kind = pred[0]
    if kind == "not":
        return lower(pred[1], not negate)
    if kind in ("and", "or"):
        items = [lower(p, negate) for p in pred[1]]
        is_and = (kind == "and") != negate
        if not items:
            return _TRUE if is_and else _FALSE
        if len(items) == 1:
            return items[0]
        return {"$and" if is_and else "$or": items}
    if kind == "cmp":
        _, fact, op, value = pred
        return _leaf(fact, op, value, negate)
    if kind == "in":
        _, fact, values = pred
        if not values:
            return _TRUE if negate else _FALSE
        return lower(("or", tuple(("cmp", fact, "eq", v) for v in values)), negate)
    if kind == "exists":
        return {f"h__{pred[1]}": not negate}
    if kind == "flag":
        return {pred[1]: not negate}
    raise EngineError(f"unknown predicate {kind}")


def ruleset_definition(compiled: list[CompiledRule]) -> dict:
    """The durable_rules JSON for one layer of rules (actions attached by the caller)."""
    rules = {}
    for i, c in enumerate(compiled):
        cond = {"$and": [_TRUE, {"sc__": c.scope}, lower(c.predicate)]}
        rules[f"r{i}"] = {"all": [{"m": cond}]}
    rules["catch_all"] = {"all": [{"m": _TRUE}]}
    return rules


def _dumps(obj) -> str:
    """JSON with our own number formatting (no exponents) for the engine's parser."""
    if type(obj) is str:  # most values: json.dumps(obj)'s own C encoder, without its call
        return _quoted(obj)
    if isinstance(obj, dict):
        return "{" + ",".join(_quoted(str(k)) + ":" + _dumps(v) for k, v in obj.items()) + "}"
    if isinstance(obj, (list, tuple)):
        return "[" + ",".join(_dumps(v) for v in obj) + "]"
    if isinstance(obj, bool) or isinstance(obj, (int, float)):
        return format_number(obj)
    if obj is None:
        return "null"
    return _quoted(str(obj))


def engine_row(values: dict, scope: str, fields: set[str], flags: dict[str, bool]) -> dict:
    """The fact asserted for one record: only the fields the layer reads, plus presence/type flags."""
    row = {"k__": "rec", "sc__": scope}
    for f in sorted(fields):
        present = f in values
        row[f"h__{f}"] = present
        v = values.get(f)
        for t in KINDS:
            row[f"{t}__{f}"] = present and value_kind(v) == t
        if present:
            row[f] = v
    row.update(flags)
    return row


def match_layer(compiled: list[CompiledRule], rows: list[dict]) -> set[tuple[str, int]]:
    """Assert every row into a fresh ruleset holding `compiled`; return the (rule id, row index) matches."""
    if not compiled or not rows:
        return set()
    dre, engine = _import_engine()
    fired: set[tuple[str, int]] = set()
    errors: list[str] = []
    definition = ruleset_definition(compiled)
    names = {f"r{i}": c.rule_id for i, c in enumerate(compiled)}

    def make_action(rule_key):
        def action(c):
            try:
                if rule_key in names:
                    fired.add((names[rule_key], int(c.m["x__"])))
            except Exception as e:  # noqa: BLE001 - durable swallows it; we surface it
                errors.append(f"{rule_key}: {e!r}")
        return action

    with _LOCK:
        name = f"diagnoser_{next(_COUNTER)}_{threading.get_ident()}"
        ruleset = _new_ruleset(engine, dre, name, definition, {k: make_action(k) for k in definition})
        try:
            for i, row in enumerate(rows):
                fact = dict(row)
                fact["id"] = f"{name}_{i}"
                fact["x__"] = i
                result = dre.assert_fact(ruleset._handle, _dumps(fact))
                if result[0] not in (0, 3):
                    raise EngineError(f"durable_rules refused record {i} (code {result[0]})")
                _drain(ruleset, result[1], errors)
            while True:  # anything still pending (should be nothing: no timer threads exist)
                pending = dre.start_action(ruleset._handle)
                if not pending:
                    break
                ruleset._flush_actions(json.loads(pending[0]), {"message": json.loads(pending[1])}, pending[2],
                                       _completion(errors))
        except dre.error as e:
            raise EngineError(f"durable_rules failed: {e}") from None
        finally:
            try:
                dre.delete_ruleset(ruleset._handle)
            except Exception:  # noqa: BLE001
                pass
    if errors:
        raise EngineError("rule action failed: " + "; ".join(errors[:3]))
    return fired


def _new_ruleset(engine, dre, name: str, definition: dict, actions: dict):
    """An engine.Ruleset whose definition JSON we serialize ourselves (its json.dumps writes 1e-05)."""
    ruleset = engine.Ruleset.__new__(engine.Ruleset)
    ruleset._name, ruleset._host, ruleset._definition = name, None, definition
    ruleset._actions = {k: engine.Promise(fn) for k, fn in actions.items()}
    ruleset._handle = dre.create_ruleset(name, _dumps(definition))
    return ruleset


def _completion(errors: list[str]):
    """durable_rules' completion callback: an action's error is kept; a signal's exception that landed
    inside durable_rules (SIGTERM as limits.Terminated, SIGINT) goes on up, as it would anywhere else."""
    def complete(e, state):
        if isinstance(e, BaseException) and not isinstance(e, Exception):
            raise e
        if e:
            errors.append(repr(e))
    return complete


def _drain(ruleset, state_handle, errors: list[str]) -> None:
    ruleset.do_actions(state_handle, _completion(errors))
