"""Subjects of BEFORE matched to AFTER's: kernels by name and launch configuration (the n-th launch
of a configuration to the n-th), else by name; ranks, devices and other subjects by id."""
from __future__ import annotations

import math

from .sides import Side, _num


def kernel_keys(side: Side) -> dict[tuple, tuple]:
    """(kind, id) of each kernel subject -> (name, grid, block, n-th launch of that configuration)."""
    seen: dict[tuple, int] = {}
    out = {}
    for key, entry in sorted(side.subjects.items(), key=lambda kv: _launch_order(kv[0])):
        if key[0] != "kernel":
            continue
        f = entry["facts"]
        name = f.get("kernel_name") or entry["name"] or key[1]
        cfg = (name, f.get("grid_blocks_count"), f.get("block_threads_count"))
        n = seen.get(cfg, 0)
        seen[cfg] = n + 1
        out[key] = cfg + (n,)
    return out


def _launch_order(key):
    kind, sid = key
    return (kind, int(sid) if str(sid).isdigit() else math.inf, str(sid))


def match_subjects(before: Side, after: Side) -> dict[tuple, tuple]:
    """BEFORE subject -> AFTER subject. Kernels: by name and launch configuration, else by name."""
    matched: dict[tuple, tuple] = {}
    kb, ka = kernel_keys(before), kernel_keys(after)
    by_cfg = {v: k for k, v in ka.items()}
    used = set()
    for k, v in kb.items():
        if v in by_cfg:
            matched[k] = by_cfg[v]
            used.add(by_cfg[v])
    by_name: dict[str, list] = {}
    for k, v in sorted(ka.items(), key=lambda kv: _launch_order(kv[0])):
        if k not in used:
            by_name.setdefault(v[0], []).append(k)
    for k, v in sorted(kb.items(), key=lambda kv: _launch_order(kv[0])):
        if k not in matched and by_name.get(v[0]):
            matched[k] = by_name[v[0]].pop(0)
    for key in before.subjects:
        if key[0] != "kernel" and key in after.subjects:
            matched[key] = key
    return matched


def _subj_json(side: Side, key):
    if key is None:
        return None
    entry = side.subjects.get(key, {})
    f = entry.get("facts", {})
    out = {"kind": key[0], "id": key[1], "name": entry.get("name")}
    if key[0] == "kernel":
        out["grid"] = _int(f.get("grid_blocks_count"))
        out["block"] = _int(f.get("block_threads_count"))
    return out


def _int(v):
    return int(v) if _num(v) is not None and float(v).is_integer() else v
