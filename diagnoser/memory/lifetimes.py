"""Who owns each allocation (by phase, lifetime and stack history) and where iterations start.

Pure functions over an AllocatorReplay and the snapshot's stacks; memory.py turns them into facts.
"""
from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np

from .. import settings
from .owners import DURABLE_OWNER, describe_call, describe_stack

TEMP_PHASES = ("forward", "backward", "optimizer")
STATEMENT_MIN_INTERMEDIATE = 0.5  # a first-run failing line's live intermediates, as a share of its request
TEMPORARY_HISTORY_PCT = settings.register(
    "memory.temporary_history_pct", 50.0, "%",
    "a tensor caught alive at the OOM, in a phase still running, is a temporary when at least this share of "
    "its stack's allocations up to the OOM were freed within their phase (by count; by bytes too for "
    "stacks without C++ frames)")


class AllocationOwners:
    """Owner, phase and site of every alloc event, plus each stack's lifetime history up to the cut.

    A tensor freed before the phase run that made it ended (forward / backward / optimizer step; a
    forward run ends with its model call at the latest) is a temporary; one that outlives it is
    durable (activations, gradients, state). A tensor still alive at the cut (the OOM) while its phase
    still runs has no known fate: the OOM's unwinding frees it. It takes the verdict of its stack's
    history: when most earlier allocations from the same stack (same frames, so same op at the same
    line) were freed within their phase, it is a temporary too.
    """

    def __init__(self, rep, stacks, cut):
        alloc = rep.alloc_idx.tolist()
        self.stack_ids = stack_ids = rep.tr.stack[rep.alloc_idx].tolist()
        desc = [describe_stack(stacks[s]) if s >= 0 else ("unknown", False, "<no frames>") for s in stack_ids]
        run_end = [rep.n] * len(alloc)
        nxt_end = rep.n  # start of the next run of a different known phase
        run_phase, run_start = None, rep.n
        for j in range(len(alloc) - 1, -1, -1):
            ph = desc[j][0]
            if ph == "unknown":
                continue
            if ph != run_phase:
                nxt_end, run_phase = run_start, ph
            run_start = alloc[j]
            run_end[j] = nxt_end
        phases = [d[0] for d in desc]
        # a forward run also ends with the model call: a tensor kept from one call into the next (an
        # output, a cache) is not a temporary, even in a loop where no other phase runs
        self.call_starts = calls = model_call_bounds(stacks, rep, phases)
        if len(calls):
            nxt = np.searchsorted(calls, rep.alloc_idx, side="right")
            call_end = np.append(calls, rep.n)[nxt].tolist()
            run_end = [min(r, c) if ph == "forward" else r for r, c, ph in zip(run_end, call_end, phases)]
        free_at = rep.free_at[rep.alloc_idx].tolist()
        sizes = rep.tr.size[rep.alloc_idx].tolist()
        hist = defaultdict(lambda: [0, 0, 0, 0])  # stack -> [temporary count, bytes, all count, bytes]
        owners, in_flight = [], []
        for j, (ph, state, _site) in enumerate(desc):
            owner = DURABLE_OWNER[ph]
            if ph in TEMP_PHASES and not (ph == "optimizer" and state) and alloc[j] < cut:
                h = hist[stack_ids[j]]
                h[2] += 1
                h[3] += sizes[j]
                if free_at[j] < min(run_end[j], cut):
                    owner = "temporaries"
                    h[0] += 1
                    h[1] += sizes[j]
                elif run_end[j] >= cut and free_at[j] >= cut:
                    in_flight.append(j)
            owners.append(owner)
        self.hist, self._stacks = dict(hist), stacks
        self._alloc, self._free_at, self._desc, self._cut, self._sizes = alloc, free_at, desc, cut, sizes
        self.uses_before_cut = Counter(s for a, s in zip(alloc, stack_ids) if a < cut)
        for j in in_flight:
            if self.temporary_by_history(stack_ids[j]):
                owners[j] = "temporaries"
        self.owners, self.phases, self.sites = owners, phases, [d[2] for d in desc]

    def failing_statement(self, request_stack, request_site, request_size):
        """Alloc positions alive at the cut that the failing statement made before its request: going
        back from the OOM, allocations at the request's site (file:line) from stacks used for the first
        time (each a different op: `(a - b).pow(2)` makes the difference, then fails on the square),
        until another site, a stack seen before (a loop, or a repeated layer) or weights / optimizer
        state end it. None unless the request's own stack is used for the first time too, and unless
        the line made intermediates at least half the request's size before it failed (one op alone,
        say a first layer's huge output, is no evidence that the line's tensors are short-lived)."""
        if request_stack < 0 or self.uses_before_cut.get(request_stack, 0):
            return None
        out = []
        for j in range(len(self._alloc) - 1, -1, -1):
            if self._alloc[j] >= self._cut:
                continue
            s, (ph, state, site) = self.stack_ids[j], self._desc[j]
            if site != request_site or s == request_stack or self.uses_before_cut[s] != 1 \
                    or ph == "parameters" or (ph == "optimizer" and state):
                break
            if self._free_at[j] >= self._cut:
                out.append(j)
        made = sum(self._sizes[j] for j in out)
        return out if out and made >= STATEMENT_MIN_INTERMEDIATE * request_size else None

    def temporary_by_history(self, stack_id) -> bool:
        """Most allocations from this stack were freed within their phase: by count where the stack
        names its ATen op (C++ frames recorded), else by count and by bytes (a Python-only stack
        lumps the ops of one line together, e.g. a conv's output with its workspace)."""
        h = self.hist.get(stack_id)
        share = float(TEMPORARY_HISTORY_PCT.value) / 100.0
        if not h or h[0] < share * h[2]:
            return False
        return bool(describe_call(self._stacks[stack_id])[2]) or h[1] >= share * h[3]


def iteration_bounds(snap, device, rep, phases, call_starts=None):
    """(event indexes where iterations start, what an iteration is): optimizer.step annotations, else
    the profiler's step annotations, else optimizer/backward runs, else model calls (a loop with
    forward only, e.g. evaluation)."""
    for mark, kind in (("Optimizer.step", "optimizer step"), ("ProfilerStep#", "profiler step")):
        # annotations the program recorded around its iterations (torch.profiler's steps, when the
        # snapshot was taken in the profiled process), more exact than any guess from the frames
        starts = sorted(a.time_us for a in snap.annotations
                        if a.device == device and a.stage == "START" and mark in a.name)
        if len(starts) >= (1 if kind == "optimizer step" else 2):
            return np.searchsorted(rep.tr.time_us, starts).astype(np.int64), kind
    for want, kind in (("optimizer", "optimizer step"), ("backward", "backward pass")):
        bounds, prev = [], None
        for i, ph in zip(rep.alloc_idx.tolist(), phases):
            if ph == "unknown":
                continue
            if ph == want and prev != want:
                bounds.append(i)
            prev = ph
        if bounds:
            return np.array(bounds, np.int64), kind
    calls = model_call_bounds(snap.stacks, rep, phases) if call_starts is None else call_starts
    return calls, "model call"


def model_call_bounds(stacks, rep, phases):
    """Starts of model calls: for each calling line, runs of allocations made at the first line of the
    outermost module's forward seen from it, broken by any other allocation (so prefill and decode
    called from two lines both count). Layers repeated inside one call share a line of the top-level
    forward, so they start no new iteration."""
    keys = [describe_call(stacks[s])[1] if s >= 0 and ph == "forward" else None
            for s, ph in zip(rep.tr.stack[rep.alloc_idx].tolist(), phases)]
    first_top, bounds, prev = {}, [], None
    for i, k in zip(rep.alloc_idx.tolist(), keys):
        if k is not None:
            first = first_top.setdefault(k[0], k)
            if k == first and prev != k:
                bounds.append(i)
        prev = k
    return np.array(bounds if len(bounds) >= 2 else [], np.int64)
