"""What part of its unit each gain claims, and the ledger that counts each part once.

A time-based finding's gain is a share of a unit (`gain_of`: step time, GPU time, trace time, peak
memory) times the part a fix recovers: `SHARE / 100 * FRACTION` (docs/rules.md). The unit is made
of disjoint *parts* sized by the run's facts: one steady step of the rank that sets its pace is GPU
busy per kernel category plus GPU idle per idle class (data, sync, alloc, launch, communication,
waiting for peers, host compute, unexplained). A share fact is declared here as the parts it is made of:
`idle_unexplained_pct` is the unexplained idle; `memory_bound_step_pct` the busy time of the
elementwise, copy, normalization, softmax and reduction kernels; a straggler rank's cost, when that
rank sets the pace, its own work (busy plus its host's data, host compute, sync, alloc and unexplained idle).

Findings are counted in rank order on one `Ledger` per unit: each claims its share from its parts,
spread over them in proportion to what is left of each; a later finding's gain counts only for
the part of its parts still unclaimed (its marginal gain), and the findings that claimed the rest
are its overlaps. A share fact declared nowhere is a part of its own (per subject): two findings
naming it explain the same time, and nothing else. Whatever the parts, the marginal gains on one
unit never add up to more than the whole unit.
"""
from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field

from .idle_classes import IDLE_FACT, IDLE_PARTS, OWN_IDLE_CLASSES, PEER_WAIT, PEER_WAIT_FACT
from .kernel_categories import BUSY_CATEGORIES as BUSY, COMMUNICATION, KERNEL_CATEGORIES, MEMORY_BOUND_CATEGORIES
from .rulespec.expr import budget_names, eval_expr

# the step's idle parts -> the fact that sizes each
IDLE = {c: (IDLE_FACT | {PEER_WAIT: PEER_WAIT_FACT})[c] for c in IDLE_PARTS}
MEMORY_OWNERS = ("parameters", "gradients", "optimizer_state", "activations", "temporaries", "unknown")


def _busy(*cats: str) -> tuple[str, ...]:
    return tuple(f"busy:{c}" for c in cats)


def _idle(*classes: str) -> tuple[str, ...]:
    return tuple(f"idle:{c}" for c in classes)


# A rank's own work (timeline catalogue, rank_own_work_pct): GPU busy plus the idle its host holds up
# doing something other than launching or communicating.
OWN_WORK = _busy(*BUSY) + _idle(*OWN_IDLE_CLASSES)


def _pace_setter(values: dict, rank: str | None) -> bool:
    """Is `rank` the one whose breakdown the run-level parts are (the last to arrive)?"""
    pace = values.get("idle_breakdown_rank", values.get("straggler_rank"))
    return rank is not None and pace is not None and str(pace) == str(rank)


def _straggler(subject, values: dict) -> tuple[str, ...]:
    """The others wait for the straggler's own work: that is, on the rank that sets the pace, its own
    work; seen from another rank (not the breakdown rank), the breakdown rank's wait for peers."""
    rank = subject.id if subject is not None and subject.kind == "rank" else values.get("straggler_rank")
    return OWN_WORK if _pace_setter(values, rank) else _idle("peer_wait")


def _top_kernel(subject, values: dict) -> tuple[str, ...]:
    cat = str(values.get("top_kernel_category", ""))
    return _idle(COMMUNICATION, PEER_WAIT) if cat == COMMUNICATION else (_busy(cat) if cat in BUSY else _busy(*BUSY))


def _leak(subject, values: dict) -> tuple[str, ...]:
    owner = str(values.get("leak_owner", ""))
    return (f"owner:{owner}",) if owner in MEMORY_OWNERS else tuple(f"owner:{o}" for o in MEMORY_OWNERS)


# unit -> share fact -> its parts (a tuple, or a function of (subject, run values) giving one)
SHARES: dict[str, dict] = {
    "step time": {
        **{fact: _idle(cls) for cls, fact in IDLE.items()},
        "gpu_idle_pct": _idle(*IDLE),
        # the host-compute idle in two (inside optimizer steps; after read-backs): both parts of idle:host
        "idle_host_optimizer_pct": _idle("host"),
        "idle_host_after_sync_pct": _idle("host"),
        "gpu_busy_pct": _busy(*BUSY),
        "gemm_unaligned_step_pct": _busy("gemm"),  # GEMMs on kernels built for unaligned operands
        "gemm_no_tensor_core_step_pct": _busy("gemm"),
        # score GEMM through value GEMM: the GEMMs, softmax and the scale / mask / transpose kernels between
        "unfused_attention_pct": _busy("gemm", "softmax", "elementwise", "copy", "reduction", "normalization", "other"),
        "memory_bound_step_pct": _busy(*MEMORY_BOUND_CATEGORIES),
        # the host's optimizer step: its kernels, and the launch gaps between them
        "optimizer_step_pct": _busy("optimizer") + _idle("launch"),
        "optimizer_gpu_pct": _busy("optimizer"),
        # the host blocked in a pageable copy: the copy itself, or the GPU idle while the host stages it
        "pageable_memcpy_pct": _busy("copy") + _idle("data", "sync"),
        # torch.compile compiling inside the steps; cuDNN's algorithm trials; waits for the GIL: the idle they
        # leave is classed unexplained (compile, GIL) or launch and sync (the trials inside the conv operators)
        "compile_step_pct": _idle("unexplained", "launch"),
        "idle_compile_pct": _idle("unexplained"),
        "conv_autotune_step_pct": _idle("launch", "sync", "alloc", "unexplained"),
        "gil_idle_pct": _idle("unexplained", "launch"),
        "idle_staging_copy_pct": _idle("unexplained"),
        "top_kernel_pct": _top_kernel,
        # the per-op roofline's op furthest below its roof (timeline/roofline.py)
        "roofline_compute_gap_step_pct": _busy("gemm", "attention", "other"),
        "roofline_memory_gap_step_pct": _busy(*MEMORY_BOUND_CATEGORIES, "gemm"),
        "rank_straggler_cost_pct": _straggler,
        "straggler_cost_pct": _straggler,
    },
    # a timeline's GPU activity time, per kernel category (a kernel's own share, kernel_time_share_pct of
    # an Nsight Compute report, is a part of its own: one per kernel launch)
    "GPU time": {
        **{f"kernel_{c}_pct": (f"gpu:{c}",) for c in KERNEL_CATEGORIES},
        "fused_attention_pct": ("gpu:attention",),
    },
    "trace time": {"setup_pct": ("setup",)},
    # live memory by owner, and what the caching allocator holds free beside it
    "peak memory": {
        **{f"{o}_share_pct": (f"owner:{o}",) for o in MEMORY_OWNERS},
        "leak_share_pct": _leak,
        "temporary_site_share_pct": ("owner:temporaries",),
        "oom_reserved_free_pct": ("reserved_free",),
        "oom_shortfall_pct": tuple(f"owner:{o}" for o in MEMORY_OWNERS),  # cut from any of the live memory
        "oom_request_share_pct": ("request",),  # the failing request itself, beside the live memory
        # a KV cache (memory/kv_cache.py): tensors made outside the model's parameters and training state,
        # recognised by frames or as a preallocated run of equal tensors
        "kv_cache_share_pct": ("owner:unknown", "owner:activations", "owner:temporaries"),
    },
}
# share facts whose value is a share of GPU activity time, not of the step: scaled to the step below
GPU_TIME_SHARES = {"top_kernel_pct"}


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
    if unit == "step time":
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
        for o in MEMORY_OWNERS:
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


def claim_of(leaf, unit: str, values: dict, sizes: dict[str, float]) -> Claim | None:
    """The claim of a single-subject finding on `unit` (its declared parts sized as `sizes`:
    unit_parts), or None when its gain names no share (a constant)."""
    names = budget_names(leaf.gain_expr) if leaf.gain_expr else frozenset()
    if not names:
        return None
    env = dict(leaf.gain_env)
    share = eval_expr(share_text(leaf.gain_expr), env)
    share = 0.0 if share is None else max(0.0, share)
    declared = SHARES.get(unit, {})
    parts, own = [], {}
    for n in sorted(names):
        spec = declared.get(n)
        got = spec(leaf.subject, values) if callable(spec) else spec
        got = tuple(p for p in got or () if p in sizes)
        if got:
            parts.extend(p for p in got if p not in parts)
            continue
        key = (leaf.subject, n)  # a part of its own, sized by the fact
        size = _num(env, n)
        own[key] = max(0.0, size or 0.0)
        parts.append(key)
    if unit == "step time" and names <= GPU_TIME_SHARES and _busy_scale(values) is not None:
        share *= _busy_scale(values)
    return Claim(tuple(parts), max(share, 100.0 * leaf.estimated_gain), leaf.estimated_gain, own)


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
