"""The inference tree's memory and op views on real H200 decode traces made by tools/gen/kv_scenarios.py
(profile_memory=True; an 8-layer fp16 decoder, d=1024, 16 heads of 64)."""
from __future__ import annotations

import pytest

from diagnoser.pipeline import diagnose, fact_blocks
from diagnoser.report.render import render_markdown

T = "fixtures/torch/c_{}.pt.trace.json.gz"


def run_facts(name: str) -> dict:
    facts = [f for _, fs in fact_blocks([T.format(name)]) for f in fs]
    return {f.name: f.value for f in facts if f.subject is None}


def test_cache_preallocated_near_the_memory_limit_leaves_no_headroom():
    v = run_facts("decode_cache_full")
    # 2 (K, V) x 8 layers x 32 sequences x 131072 tokens x 1024 x 2 bytes = 128 GiB, allocated before the window
    assert v["mem_persistent_gb"] == pytest.approx(128.0, abs=0.5)
    assert v["device_memory_total_gb"] == pytest.approx(139.8, abs=0.1)
    assert v["memory_headroom_pct"] < 10
    assert v["mem_growth_mb_per_step"] == 0.0  # preallocated: nothing grows per token


def test_growing_cache_grows_by_its_bytes_per_token():
    v = run_facts("decode_b64_roomy")
    # torch.cat adds one token per step: 2 x 8 layers x 64 sequences x 16 heads x 64 x 2 bytes = 2,097,152 B
    assert v["mem_growth_mb_per_step"] == pytest.approx(2.097152, rel=1e-6)
    assert v["memory_headroom_pct"] > 90


def test_kv_rules_fire_on_their_workloads_and_not_on_the_twins():
    fired = {n: {f.rule for f in diagnose([T.format(n)]).findings}
             for n in ("decode_cache_full", "decode_cache_fit", "decode_b1_roomy", "decode_b64_roomy")}
    assert "INFER015" in fired["decode_cache_full"] and "INFER015" not in fired["decode_cache_fit"]
    assert "INFER016" in fired["decode_b1_roomy"] and "INFER016" not in fired["decode_b64_roomy"]
    assert "INFER016" not in fired["decode_cache_full"]  # small batch, but no memory to raise it into


def test_trace_without_memory_events_says_how_to_collect_them():
    rep = diagnose(["fixtures/torch/m_infer_kv_decode.pt.trace.json.gz"])
    missing = {n.rule: n for n in rep.not_evaluated}
    assert "INFER015" in missing and "profile_memory=True" in missing["INFER015"].collect


def test_op_distribution_names_the_cudnn_attention_plan_cost():
    """At batch 32 the cuDNN SDPA op leads the GPU time of ops and spends ~40 ms of CPU per decode step
    (the KV length changes every step)."""
    rep = diagnose([T.format("decode_cache_fit")])
    rows = rep.charts["top_ops"]
    assert rows[0]["op"] == "aten::_cudnn_attention_forward"
    assert rows[0]["calls_per_step"] == 8.0  # one per layer
    assert rows[0]["cpu_ms_per_step"] > 10 * rows[0]["gpu_ms_per_step"]
    assert sum(r["gpu_share_pct"] for r in rows) <= 100.0 + 1e-9
    [f] = [f for f in rep.findings if f.rule == "INFER017"]
    assert "--launch-count 8" in f.fix
    md = render_markdown(rep)
    assert "## Top ops by GPU time" in md and "| `aten::_cudnn_attention_forward` | 8.0 |" in md
    assert "## Top kernels per step" in md


@pytest.mark.parametrize("trace", ["fixtures/torch/m_infer_einsum_attention.pt.trace.json.gz",
                                   "fixtures/torch/host_sync.pt.trace.json.gz"])
def test_every_torch_trace_gets_the_op_table(trace):
    md = render_markdown(diagnose([trace]))
    assert "## Top ops by GPU time" in md


def test_nsys_export_gets_the_kernel_table_but_no_op_table():
    md = render_markdown(diagnose(["fixtures/nsys/c_train_mlp.sqlite.gz"]))
    assert "## Top kernels per step" in md and "## Top ops by GPU time" not in md
