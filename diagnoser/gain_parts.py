"""What part of its unit each gain claims, and the ledger that counts each part once.

A time-based finding's gain is a share of a unit (`gain_of`: step time, GPU time, trace time, peak
memory) times the part a fix recovers: `SHARE / 100 * FRACTION` (docs/rules.md). The unit is made
of disjoint *parts* sized by the run's facts: one steady step of the rank that sets its pace is GPU
busy per kernel category plus GPU idle per idle class (data, sync, alloc, launch, communication,
waiting for peers, host compute, unexplained). A share fact declares the parts it is made of in its
catalogue entry (`FactSpec.share`, diagnoser/shares.py), and the ledger reads them from the catalogue:
`idle_unexplained_pct` is the unexplained idle; `memory_bound_step_pct` the busy time of the
elementwise, copy, normalization, softmax and reduction kernels; a straggler rank's cost, when that
rank sets the pace, its own work (busy plus its host's data, host compute, sync, alloc and unexplained idle).

Findings are counted in rank order on one `Ledger` per unit: each claims its share from its parts,
spread over them in proportion to what is left of each; a later finding's gain counts only for
the part of its parts still unclaimed (its marginal gain), and the findings that claimed the rest
are its overlaps. A share fact that declares no parts is a part of its own (per subject): two findings
naming it explain the same time, and nothing else. Whatever the parts, the marginal gains on one
unit never add up to more than the whole unit.
"""
from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field

from .idle_classes import IDLE_FACT, IDLE_PARTS, PEER_WAIT, PEER_WAIT_FACT
from .kernel_categories import BUSY_CATEGORIES as BUSY, COMMUNICATION, KERNEL_CATEGORIES
from .memory_owners import OWNERS
from .rulespec.expr import budget_names, eval_expr
from .shares import ALL_OWNERS, OWN_WORK, STEP_TIME, Share, busy, idle

# the step's idle parts -> the fact that sizes each
IDLE = {c: (IDLE_FACT | {PEER_WAIT: PEER_WAIT_FACT})[c] for c in IDLE_PARTS}


def _pace_setter(values: dict, rank: str | None) -> bool:
    """Is `rank` the one whose breakdown the run-level parts are (the last to arrive)?"""
    pace = values.get("idle_breakdown_rank", values.get("straggler_rank"))
    return rank is not None and pace is not None and str(pace) == str(rank)


def _straggler(subject, values: dict) -> tuple[str, ...]:
    """The others wait for the straggler's own work: that is, on the rank that sets the pace, its own
    work; seen from another rank (not the breakdown rank), the breakdown rank's wait for peers."""
    rank = subject.id if subject is not None and subject.kind == "rank" else values.get("straggler_rank")
    return OWN_WORK if _pace_setter(values, rank) else idle(PEER_WAIT)


def _top_kernel(subject, values: dict) -> tuple[str, ...]:
    cat = str(values.get("top_kernel_category", ""))
    return idle(COMMUNICATION, PEER_WAIT) if cat == COMMUNICATION else (busy(cat) if cat in BUSY else busy(*BUSY))


def _leak(subject, values: dict) -> tuple[str, ...]:
    owner = str(values.get("leak_owner", ""))
    return (f"owner:{owner}",) if owner in OWNERS else ALL_OWNERS


# Share.by: the run's fact that picks a share's parts -> how (subject, run values) give them
PARTS_BY = {"straggler_rank": _straggler, "top_kernel_category": _top_kernel, "leak_owner": _leak}


def share_parts(share: Share, subject, values: dict) -> tuple[str, ...]:
    """The parts of its unit a share fact is made of, for this subject in this run."""
    return share.parts or PARTS_BY[share.by](subject, values)


def _num(values: dict, name: str) -> float | None:
    v = values.get(name)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _busy_scale(values: dict) -> float | None:
    """% of step per % of GPU activity time: gpu_busy_pct over the non-communication kernel shares."""
    busy = _num(values, "gpu_busy_pct")
    cats = [_num(values, f"kernel_{c}_pct") for c in BUSY]
    total = sum(c for c in cats if c is not None)
    return busy / total if busy is not None and total > 0 else None


def unit_parts(unit: str, values: dict) -> dict[str, float]:
    """The declared parts of `unit` in this run, each sized in % of the unit (absent facts: no part)."""
    parts: dict[str, float] = {}
    if unit == STEP_TIME:
        for cls, fact in IDLE.items():
            if _num(values, fact) is not None:
                parts[f"idle:{cls}"] = max(0.0, _num(values, fact))
        scale = _busy_scale(values)
        if scale is not None:
            for c in BUSY:
                parts[f"busy:{c}"] = max(0.0, (_num(values, f"kernel_{c}_pct") or 0.0) * scale)
    elif unit == "GPU time":
        for c in KERNEL_CATEGORIES:
            if _num(values, f"kernel_{c}_pct") is not None:
                parts[f"gpu:{c}"] = max(0.0, _num(values, f"kernel_{c}_pct"))
    elif unit == "trace time" and _num(values, "setup_pct") is not None:
        parts["setup"] = max(0.0, _num(values, "setup_pct"))
    elif unit == "peak memory":
        for o in OWNERS:
            if _num(values, f"{o}_share_pct") is not None:
                parts[f"owner:{o}"] = max(0.0, _num(values, f"{o}_share_pct"))
        if _num(values, "oom_reserved_free_pct") is not None:
            parts["reserved_free"] = max(0.0, _num(values, "oom_reserved_free_pct"))
        if _num(values, "oom_request_share_pct") is not None:
            parts["request"] = max(0.0, _num(values, "oom_request_share_pct"))
    return parts


@functools.lru_cache(maxsize=1024)
def share_text(expr: str) -> str | None:
    """The leftmost factor of a gain expression (the share it explains), as text; None if it has none."""
    try:
        node = ast.parse(str(expr), mode="eval").body
    except SyntaxError:
        return None
    while isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div)):
        node = node.left
    return ast.unparse(node)


@dataclass
class Claim:
    """What one single-subject finding claims: its parts, the share (in % of the unit) and its gain."""

    parts: tuple  # part keys: "idle:launch", or (subject, fact) for a share fact declared nowhere
    share: float
    gain: float
    own: dict = field(default_factory=dict)  # undeclared parts -> their size (the fact's value)


def claim_of(leaf, unit: str, values: dict, sizes: dict[str, float], catalogue: dict) -> Claim | None:
    """The claim of a single-subject finding on `unit` (its declared parts sized as `sizes`:
    unit_parts; each share fact's parts from its catalogue entry), or None when its gain names no
    share (a constant)."""
    names = budget_names(leaf.gain_expr) if leaf.gain_expr else frozenset()
    if not names:
        return None
    env = dict(leaf.gain_env)
    share = eval_expr(share_text(leaf.gain_expr), env)
    share = 0.0 if share is None else max(0.0, share)
    shares = {n: _share_of(catalogue, n) for n in names}
    parts, own = [], {}
    for n in sorted(names):
        declared = shares[n]
        got = share_parts(declared, leaf.subject, values) if declared and declared.unit == unit else ()
        got = tuple(p for p in got if p in sizes)
        if got:
            parts.extend(p for p in got if p not in parts)
            continue
        key = (leaf.subject, n)  # a part of its own, sized by the fact
        size = _num(env, n)
        own[key] = max(0.0, size or 0.0)
        parts.append(key)
    if unit == STEP_TIME and all(s is not None and s.of_gpu_time for s in shares.values()) \
            and _busy_scale(values) is not None:
        share *= _busy_scale(values)
    return Claim(tuple(parts), max(share, 100.0 * leaf.estimated_gain), leaf.estimated_gain, own)


def _share_of(catalogue: dict, name: str) -> Share | None:
    spec = catalogue.get(name)
    return getattr(spec, "share", None)


@dataclass
class Ledger:
    """One unit of one run: each part's size, how much of it is claimed, and by which rules."""

    sizes: dict
    used: dict = field(default_factory=dict)  # part -> % of the unit claimed
    by: dict = field(default_factory=dict)  # part -> rules that claimed some of it, in rank order
    counted: float = 0.0  # marginal gains counted on this unit so far (fraction of the unit)
    counters: list = field(default_factory=list)  # the rules they came from

    def value(self, claims: list[Claim], rule: str) -> tuple[float, list[str], dict]:
        """(marginal gain, the rules that claimed the same parts before, the claims' use of each part)
        for one finding made of `claims` (its per-kernel or per-launch parts, claimed in turn)."""
        use: dict = {}
        total, overlaps = 0.0, set()
        for c in claims:
            for key, size in c.own.items():
                self.sizes.setdefault(key, size)
            left = {p: max(0.0, self.sizes[p] - self.used.get(p, 0.0) - use.get(p, 0.0)) for p in c.parts}
            size = sum(self.sizes[p] for p in c.parts)
            free = sum(left.values())
            ratio = 1.0 if size <= 0 else min(1.0, free / size)
            if ratio < 1.0 - 1e-9:
                overlaps.update(r for p in c.parts for r in self.by.get(p, ()) if r != rule)
            total += c.gain * ratio
            take = min(c.share, free)
            for p, lp in left.items():
                if lp > 0 and free > 0:
                    use[p] = use.get(p, 0.0) + take * lp / free
        room = max(0.0, 1.0 - self.counted)
        if total > room + 1e-9:  # the unit is full: whoever counted before explains the rest
            overlaps.update(r for r in self.counters if r != rule)
        return min(total, room), sorted(overlaps), use

    def commit(self, rule: str, marginal: float, use: dict) -> None:
        for p, amount in use.items():
            self.used[p] = self.used.get(p, 0.0) + amount
            if rule not in self.by.setdefault(p, []):
                self.by[p].append(rule)
        self.counted += marginal
        if marginal > 0 and rule not in self.counters:
            self.counters.append(rule)
