"""JSON Schema of a rule file, and advice-style messages for what is wrong with one."""
from __future__ import annotations

from ..program_kinds import SELECTORS
from .model import SCOPES, SEVERITIES
from .operators import OPS, VERIFY_OPS

_ID = r"^[A-Z][A-Z0-9]*[0-9]{3}$"
_NAME = r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$"
_IDENT = r"^[a-z][a-z0-9_]*$"

CONDITION = {
    "oneOf": [
        {
            "type": "object",
            "required": ["fact", "op"],
            "properties": {
                "fact": {"type": "string", "pattern": _IDENT},
                "op": {"enum": list(OPS)},
                "value": {},
                "param": {"type": "string", "pattern": _IDENT},
            },
            "additionalProperties": False,
        },
        {
            "type": "object", "required": ["finding"],
            "properties": {"finding": {"type": "string", "pattern": _ID}},
            "additionalProperties": False,
        },
        {"type": "object", "required": ["all"], "properties": {"all": {"$ref": "#/$defs/list"}}, "additionalProperties": False},
        {"type": "object", "required": ["any"], "properties": {"any": {"$ref": "#/$defs/list"}}, "additionalProperties": False},
        {"type": "object", "required": ["none"], "properties": {"none": {"$ref": "#/$defs/list"}}, "additionalProperties": False},
        {
            "type": "object", "required": ["condition"],
            "properties": {"condition": {"type": "string", "pattern": _NAME}},
            "additionalProperties": False,
        },
    ],
}

# a text variant: `for` selects it by program facts (docs/rules.md, Text variants), the texts replace the rule's
VARIANT = {
    "type": "object",
    "required": ["for"],
    "anyOf": [{"required": [k]} for k in ("title", "message", "fix", "verify", "refs")],
    "properties": {
        "for": {
            "type": "object", "minProperties": 1, "additionalProperties": False,
            "properties": {name: {"oneOf": [{"enum": list(values)},
                                            {"type": "array", "minItems": 1, "items": {"enum": list(values)}}]}
                           for name, values in SELECTORS.items()},
        },
        "title": {"type": "string", "minLength": 3},
        "message": {"type": "string"},
        "fix": {"type": "string"},
        "verify": {"type": "string"},
        "refs": {"type": "array", "items": {"type": "string"}},
    },
    "additionalProperties": False,
}

WORKLOADS = ("training", "inference")

RULE = {
    "type": "object",
    "required": ["name", "title", "category", "severity", "when", "message", "fix", "verify"],
    "if": {"not": {"required": ["ids"]}}, "then": {"required": ["id"]},  # `id`, or `ids` and no `id`
    "dependentSchemas": {"ids": {"not": {"required": ["id"]}}},
    "properties": {
        "id": {"type": "string", "pattern": _ID},
        # one mechanism for several workloads (docs/rules.md, One rule for training and inference): the
        # loader expands it into one rule per id, `when` guarded by workload_kind, `for_workload` texts applied
        "ids": {"type": "object", "minProperties": 2, "propertyNames": {"enum": list(WORKLOADS)},
                "additionalProperties": {"type": "string", "pattern": _ID}},
        "for_workload": {"type": "object", "propertyNames": {"enum": list(WORKLOADS)},
                         "additionalProperties": {"type": "object"}},
        "name": {"type": "string", "pattern": _NAME},
        "title": {"type": "string", "minLength": 3},
        "tree": {"type": "string", "pattern": _NAME},
        "category": {"type": "string", "pattern": _IDENT},
        "severity": {"enum": list(SEVERITIES)},
        "status": {"enum": ["stable", "experimental"]},
        "scope": {"enum": list(SCOPES)},
        "requires": {"type": "array", "items": {"type": "string", "pattern": _IDENT}},
        "params": {
            "type": "object",
            "propertyNames": {"pattern": _IDENT},
            "additionalProperties": {"type": ["number", "string", "boolean"]},
        },
        "when": {"$ref": "#/$defs/condition"},
        "message": {"type": "string"},
        "evidence": {"type": "array", "items": {"type": "string", "pattern": _IDENT}},
        "estimated_gain": {"type": ["string", "number"]},
        "gain_of": {"type": "string"},
        "fix": {"type": "string"},
        "verify": {"type": "string"},
        "verify_check": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["fact", "op"], "additionalProperties": False,
            "properties": {"fact": {"type": "string", "pattern": _IDENT}, "op": {"enum": list(VERIFY_OPS)},
                           "value": {}, "param": {"type": "string", "pattern": _IDENT}}}},
        "refs": {"type": "array", "items": {"type": "string"}},
        "not_applicable": {
            "type": "object", "required": ["when", "reason"], "additionalProperties": False,
            "properties": {"when": {"$ref": "#/$defs/condition"}, "reason": {"type": "string", "minLength": 3}}},
        "variants": {"type": "array", "minItems": 1, "items": VARIANT},
    },
    "additionalProperties": False,
}

# what `for_workload` may change per workload: the rule's keys but its ids and its `when`
RULE["properties"]["for_workload"]["additionalProperties"] = {
    "type": "object", "additionalProperties": False,
    "properties": {k: v for k, v in RULE["properties"].items() if k not in ("id", "ids", "for_workload", "when")}}

RULE_FILE = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "anyOf": [{"required": ["rules"]}, {"required": ["conditions"]}, {"required": ["params"]}],
    "properties": {
        "tree": {"type": "string", "pattern": _NAME},
        "rules": {"type": "array", "items": RULE, "minItems": 1},
        "conditions": {
            "type": "object",
            "propertyNames": {"pattern": _NAME},
            "additionalProperties": {
                "type": "object", "required": ["when"],
                "properties": {
                    "params": {"type": "object", "propertyNames": {"pattern": _IDENT},
                               "additionalProperties": {"type": ["number", "string", "boolean"]}},
                    "when": {"$ref": "#/$defs/condition"},
                },
                "additionalProperties": False,
            },
        },
        "params": {  # pack params: thresholds several rules share, declared once (docs/rules.md, Pack params)
            "type": "object",
            "propertyNames": {"pattern": _IDENT},
            "additionalProperties": {"type": ["number", "string", "boolean"]},
        },
        "settings": {
            "type": "object",
            "propertyNames": {"pattern": r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$"},
            "additionalProperties": {"type": ["number", "string", "boolean"]},
        },
    },
    "additionalProperties": False,
    "$defs": {
        "condition": CONDITION,
        "list": {"type": "array", "items": {"$ref": "#/$defs/condition"}},
    },
}

FIELD_ADVICE = {
    "id": "an id like TRAIN001 (capital letters, then three digits; never reuse one)",
    "name": "a kebab-case name of the problem, e.g. host-sync-in-step-loop",
    "title": "a one-line title",
    "category": "a snake_case category, e.g. host_sync",
    "severity": "one of: " + ", ".join(SEVERITIES),
    "when": "a condition tree: all/any/none of {fact, op, param|value} or {finding: ID}",
    "message": "a message template with the measured numbers, e.g. '{gpu_busy_pct:.0f}% busy'",
    "fix": "the fix, in a sentence or a snippet",
    "verify": "what to re-measure and which number to expect",
    "verify_check": "the Verify step as conditions on the re-profiled run, e.g. [{fact: idle_data_pct, op: lt, param: min_idle_data_pct}]",
    "not_applicable": "what the trace shows when the rule's subject is absent, and why: "
                      "{when: {fact: gemm_time_pct, op: eq, value: 0}, reason: 'no GEMM kernels run'}",
    "op": "an op, one of: " + ", ".join(OPS),
    "rules": "a list of rules under `rules:`",
    "for": "the program facts that select the variant, e.g. {framework: [cuda, openacc-openmp]} (keys: "
           + ", ".join(SELECTORS) + ")",
}


def _did_you_mean(value, choices) -> str:
    import difflib
    close = difflib.get_close_matches(str(value), list(choices), n=1, cutoff=0.8)
    return f" (did you mean `{close[0]}`?)" if close else ""


def advice(error) -> str:
    """Turn a jsonschema ValidationError into a sentence that says what to add or change."""
    v = error.validator
    where = ".".join(str(p) for p in error.absolute_path) or "top level"
    if v == "anyOf" and error.absolute_path and isinstance(error.instance, dict) and "for" in error.instance:
        return f"{where}: a variant needs a text: add `title`, `message`, `fix` or `verify` (missing: all four)"
    if v == "anyOf" and not error.absolute_path:
        return "top level: missing `rules`; add a list of rules under `rules:` (or shared `conditions:` or pack `params:`)"
    if v == "required":
        missing = [m for m in error.validator_value if m not in (error.instance or {})]
        if error.schema is CONDITION or "fact" in error.validator_value:
            pass
        name = missing[0] if missing else "?"
        return f"{where}: missing `{name}`; add {FIELD_ADVICE.get(name, 'it')}"
    if v == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed)) if isinstance(error.instance, dict) else []
        return f"{where}: unknown key `{', '.join(extra)}`; allowed keys: {', '.join(allowed)}"
    if v == "enum" and error.absolute_path and error.absolute_path[-1] == "scope":
        return (f"{where}: unknown scope `{error.instance}`{_did_you_mean(error.instance, SCOPES)}; use one of: "
                f"{', '.join(SCOPES)} (the kind of subject the rule is evaluated on; "
                f"`diagnose facts --catalogue` gives each fact's)")
    if v == "enum":
        return f"{where}: `{error.instance}` is not allowed; use one of: {', '.join(map(str, error.validator_value))}"
    if v == "pattern":
        key = str(error.absolute_path[-1]) if error.absolute_path else ""
        return f"{where}: `{error.instance}` is not well-formed; expected {FIELD_ADVICE.get(key, 'pattern ' + error.validator_value)}"
    if v == "oneOf" and len(error.absolute_path) >= 2 and error.absolute_path[-2] == "for":
        fact = str(error.absolute_path[-1])
        return (f"{where}: `{error.instance}` is not allowed for {fact}; use one of: {', '.join(SELECTORS[fact])} "
                f"(or a list of them)")
    if v == "oneOf":
        inst = error.instance
        if isinstance(inst, dict) and "op" in inst and inst.get("op") not in OPS:
            return f"{where}: unknown op `{inst.get('op')}`; use one of: {', '.join(OPS)}"
        if isinstance(inst, dict):
            keys = ", ".join(sorted(map(str, inst)))
            return (f"{where}: not a valid condition (keys: {keys}); write {{fact: NAME, op: OP, param: P}}, "
                    f"{{finding: ID}}, {{condition: NAME}} or all/any/none: [conditions]")
        return f"{where}: a condition must be a mapping, got {type(inst).__name__}"
    if v == "type":
        return f"{where}: expected {error.validator_value}, got {type(error.instance).__name__} `{error.instance}`"
    if v == "minItems":
        return f"{where}: must not be empty"
    return f"{where}: {error.message}"
