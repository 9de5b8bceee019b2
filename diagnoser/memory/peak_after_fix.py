"""The memory an OOM finding's fix leaves at the peak, from the snapshot's facts (docs/calibration.md,
"Other units"): what the fix frees at the composition point (the live bytes plus the failing request,
`needed_gib`), as a range in GiB with what it assumes, or why the snapshot cannot say."""
from __future__ import annotations

# a chunked or fused replacement of a temporary keeps at most this share of it alive at once (a chunk of
# 1/8 of the big dimension; cdist's output without the broadcast feature dimension)
CHUNK_KEPT_SHARE = 1 / 8
# expandable segments leave at most this share of slack above the allocated bytes (page rounding)
EXPANDABLE_SLACK_SHARE = 0.02
GIB_PER_MIB = 1 / 1024


def peak_after_fix(rule: str, values: dict, params: dict | None = None) -> dict | None:
    """{unit, measured, low, high, assumes} (and `measure` where it is not the memory needed at the peak) for the finding of `rule` on a snapshot's run-level facts
    `values`, or {unit, measured, not_computable} where its fix's effect is not in the snapshot;
    None for a rule that is not an OOM finding or facts that are missing."""
    params = params or {}
    got = _FIXES.get(rule)
    if got is None:
        return None
    needed = _num(values, "needed_gib")
    if needed is None and rule == "INFER015":  # a torch memory timeline: its allocated peak
        needed = _num(values, "mem_allocated_peak_gb")
    if needed is None:
        return None
    out = got(values, params, needed)
    if out is None:
        return None
    out = {"unit": "GiB", "measured": needed, **out}
    top = out["measured"]
    if "low" in out:
        out["low"], out["high"] = max(0.0, min(out["low"], top)), max(0.0, min(out["high"], top))
        out["low"] = min(out["low"], out["high"])
    return out


def _num(values: dict, name: str) -> float | None:
    v = values.get(name)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _leak(values, params, needed):
    leak, per_iter = _num(values, "leak_gib"), _num(values, "leak_mib_per_iter")
    if leak is None:
        return None
    per = (per_iter or 0.0) * GIB_PER_MIB
    return {"low": needed - leak - per, "high": needed - leak,
            "assumes": f"nothing is kept across iterations: the {leak:.2f} GiB made in earlier iterations goes "
                       f"(high); under no_grad the current iteration's {per:.2f} GiB goes too (low)"}


def _temporary_site(values, params, needed):
    site = _num(values, "temporary_site_gib")
    if site is None:
        return None
    return {"low": needed - site, "high": needed - site * (1 - CHUNK_KEPT_SHARE),
            "assumes": f"the {site:.2f} GiB of temporaries at the site is not materialized: none of it stays "
                       f"(low) or a chunk of 1/{round(1 / CHUNK_KEPT_SHARE)} of it (high); work after the "
                       "failing allocation is not in the snapshot"}


def _one_request(values, params, needed):
    live, request = _num(values, "composition_allocated_gib"), _num(values, "oom_request_mib")
    if live is None or request is None:
        return None
    req = request * GIB_PER_MIB
    return {"low": live, "high": live + req * CHUNK_KEPT_SHARE,
            "assumes": f"the {req:.2f} GiB request becomes nothing kept (low) or chunks of "
                       f"1/{round(1 / CHUNK_KEPT_SHARE)} of it (high) beside the {live:.2f} GiB live"}


def _kv_cache(values, params, needed):
    kv = _num(values, "kv_cache_gib")
    if kv is None:
        return None
    return {"low": needed - kv, "high": needed - kv * 0.5,
            "assumes": f"the {kv:.2f} GiB cache is paged and holds nothing yet at the first request (low) or is "
                       "halved (high, the rule's estimate); the positions served are not in the snapshot, nor "
                       "the work after the failing allocation"}


def _fragmentation(values, params, needed):
    free, reserved = _num(values, "oom_reserved_free_gib"), _num(values, "oom_reserved_gib")
    request = _num(values, "oom_request_mib")
    if free is None or reserved is None or request is None:
        return None
    return {"measured": reserved + request * GIB_PER_MIB, "measure": "reserved with the request", "low": needed,
            "high": needed * (1 + EXPANDABLE_SLACK_SHARE),
            "assumes": f"reserved memory (held plus the request): the {free:.2f} GiB reserved but free in pieces "
                       f"goes with expandable segments, up to {EXPANDABLE_SLACK_SHARE:.0%} slack above the "
                       f"{needed:.2f} GiB needed stays (page rounding)"}


def _optimizer_state(values, params, needed):
    state = _num(values, "optimizer_state_gib")
    if state is None:
        return None
    saving = float(params.get("state_saving_fraction", 0.75))
    return {"low": needed - state, "high": needed - state * saving,
            "assumes": f"the {state:.2f} GiB of optimizer state is sharded off this GPU (low) or keeps "
                       f"{1 - saving:.0%} (high: 8-bit states, or sharded over {round(1 / max(1 - saving, 1e-9))} ranks)"}


def _not_computable(reason: str):
    return lambda values, params, needed: {"not_computable": reason}


_FIXES = {
    "OOM003": _leak,
    "OOM007": _temporary_site,
    "OOM008": _one_request,
    "OOM009": _kv_cache,
    "OOM004": _fragmentation,
    "OOM002": _optimizer_state,
    "OOM001": _not_computable("what activation checkpointing frees depends on which block inputs it keeps, "
                              "which the snapshot does not say"),
    "OOM005": _not_computable("the fix is a choice (a smaller dtype, sharding, a smaller batch) that the "
                              "snapshot cannot size"),
    "OOM006": _not_computable("the snapshot has no allocation history: no owner's bytes to take away"),
    "INFER015": _not_computable("the trace gives the bytes that stay allocated, not which of them are the KV "
                                "cache nor how many of its positions are served"),
}
