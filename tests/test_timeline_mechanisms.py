"""Issue 21's timeline workloads (tools/gen/timeline_mechanisms.py; fixtures `t_*`, fixtures/README.md
"Timeline mechanisms (issue 21)"): real H200 runs, each under torch.profiler and Nsight Systems (two
sources of one run), one root cause each by construction, labelled from the numbers read off the
traces. Each file's first fix, what decided it, and that the two sources of a run name the same first
fix (or the same two, when two causes are of one size)."""
from __future__ import annotations

import pytest

from diagnoser.pipeline import diagnose

SOURCES = {"torch": "torch/{}.pt.trace.json.gz", "nsys": "nsys/{}.sqlite.gz"}

# name -> (sources shipped, the first fix: one category, or two tied ones)
EXPECTED = {
    "t_train_long_attention": (("torch", "nsys"), {"unfused_attention"}),
    "t_train_long_sdpa": (("torch",), {"none"}),
    "t_infer_long_attention": (("torch", "nsys"), {"unfused_attention"}),
    "t_train_logits_readback": (("torch", "nsys"), {"host_sync"}),
    "t_train_logits_on_gpu": (("torch",), {"none"}),
    "t_train_cpu_adamw": (("torch", "nsys"), {"host_compute"}),
    "t_train_gpu_adamw": (("torch",), {"none"}),
    "t_train_moe_nonzero": (("torch", "nsys"), {"host_sync", "launch_overhead"}),
    "t_setup_short_infer": (("torch", "nsys"), {"one_time_setup"}),
}


def path_of(fixtures_dir, name, source):
    return fixtures_dir / SOURCES[source].format(name)


def serious(report):
    return [f for f in report.findings if f.severity in ("critical", "warning")]


def first_fix(report) -> set[str]:
    """The first fix's category, with the one tied to it (two causes of one size)."""
    s = serious(report)
    if not s:
        return {"none"}
    out = {s[0].category}
    if s[0].tied_first:
        out |= {f.category for f in s[1:2] if f.rule == s[0].tied_first}
    return out


def facts(report) -> dict:
    return {f.name: f.value for f in report.facts if f.subject is None}


_CACHE: dict = {}


def report_of(fixtures_dir, name, source):
    key = (name, source)
    if key not in _CACHE:
        _CACHE[key] = diagnose([str(path_of(fixtures_dir, name, source))])
    return _CACHE[key]


CASES = [(n, s) for n, (sources, _) in sorted(EXPECTED.items()) for s in sources]


@pytest.mark.parametrize("name,source", CASES)
def test_first_fix_is_the_cause_built_in(fixtures_dir, name, source):
    want = EXPECTED[name][1]
    got = first_fix(report_of(fixtures_dir, name, source))
    if len(want) == 1:
        assert got == want
    else:  # two causes of one size: both named, or the larger one alone when they are apart
        assert got & want and got <= want


@pytest.mark.parametrize("name", sorted(n for n, (s, _) in EXPECTED.items() if len(s) == 2))
def test_two_sources_of_one_run_name_the_same_first_fix(fixtures_dir, name):
    torch_fix = first_fix(report_of(fixtures_dir, name, "torch"))
    nsys_fix = first_fix(report_of(fixtures_dir, name, "nsys"))
    assert torch_fix == nsys_fix, (torch_fix, nsys_fix)
