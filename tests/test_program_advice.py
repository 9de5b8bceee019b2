"""Advice right for the program: the program facts (framework, attention_kind, gpu_arch) measured on
real files, and the rule text variants they select. The walker over every rule x framework x attention
kind x GPU generation fails when a fix names another framework's API, tells a model that is not causal
to use `is_causal=True`, or gives TF32/bf16-only advice to a pre-Ampere or unknown GPU without the fp16
path."""
from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest
import yaml

from diagnoser.catalogue import catalogue
from diagnoser.rulespec.operators import truth
from diagnoser.errors import RuleError
from diagnoser.pipeline import diagnose, fact_blocks, load_pack
from diagnoser.program_kinds import ATTENTION_KINDS, FRAMEWORKS, GPU_ARCHS, PRE_AMPERE, SELECTORS, SERVING_ENGINES
from diagnoser.rulespec.loader import build_pack
from diagnoser.timeline.measure import tensor_core_dtypes

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
EXT = SHARED / "external"
needs_shared = pytest.mark.skipif(not EXT.is_dir(), reason="../shared/external (real third-party traces) is absent")

PYTORCH_API = re.compile(r"\btorch[._]|\bDataLoader\b|\.item\(\)|\.cpu\(\)|\bautocast\b|GradScaler|PYTORCH_|"
                         r"TORCHINDUCTOR|\bmodel\.(half|to)\(|\bnn\.Module|prof\.step|python (train|serve)\.py|"
                         r"py-spy|scaled_dot_product_attention|sdpa_kernel|non_blocking")
OPENACC_API = re.compile(r"!\$acc|#pragma acc|\$acc\b|-gpu=|NVHPC|nvfortran|\basync\(\d")
JAX_API = re.compile(r"\bjax\.|\bjnp\.|XLA_FLAGS")
CUDA_LAUNCH = re.compile(r"<<<")
FORBIDDEN = {  # framework -> the other frameworks' APIs its advice must not name
    "pytorch": (OPENACC_API, JAX_API),
    "jax-xla": (PYTORCH_API, OPENACC_API),
    "openacc-openmp": (PYTORCH_API, JAX_API, CUDA_LAUNCH),
    "cuda": (PYTORCH_API, OPENACC_API, JAX_API),
    "triton": (PYTORCH_API, OPENACC_API, JAX_API),
    "unknown": (OPENACC_API, JAX_API),
    **{s: (OPENACC_API, JAX_API) for s in SERVING_ENGINES},
}
NEWER_GPU_ONLY = re.compile(r"tf32|bf16|bfloat16|set_float32_matmul_precision", re.I)
OLDER_PATH = re.compile(r"fp16|float16", re.I)


def test_every_framework_has_its_forbidden_apis():
    assert set(FORBIDDEN) == set(FRAMEWORKS)


PYTORCH_FAMILY = ("pytorch", "unknown") + SERVING_ENGINES
ORIGINS_OUTSIDE_PYTORCH = ("user code", "cuBLAS", "cuDNN", "CUTLASS", "Triton")  # kernels of a non-PyTorch program


def _combinations(rule):
    """Every (values) a rule can see for the program facts, skipping those its `when` rules out; a
    program of another framework runs no PyTorch kernels (kernel_origin), a PyTorch one may run any."""
    for fw, att, arch, kind in itertools.product(FRAMEWORKS, ATTENTION_KINDS, GPU_ARCHS, SELECTORS["workload_kind"]):
        for origin in (None,) if fw in PYTORCH_FAMILY else ORIGINS_OUTSIDE_PYTORCH:
            values = {"framework": fw, "attention_kind": att, "gpu_arch": arch, "workload_kind": kind,
                      "tensor_core_dtypes": tensor_core_dtypes([], arch)}
            if origin is not None:
                values["kernel_origin"] = origin
            if truth(rule.when, values, rule.params) is False:
                continue
            yield values


def test_walk_every_rule_by_framework_attention_kind_and_gpu():
    pack = load_pack()
    bad = []
    for rule in pack.ordered():
        if rule.tree == "oom":  # memory snapshots are PyTorch's own: no program facts, the rule's own text
            continue
        seen = set()
        for values in _combinations(rule):
            texts, _ = rule.texts(values)
            key = (values["framework"], values["attention_kind"], values["gpu_arch"], tuple(map(str, texts.values())))
            if key in seen:
                continue
            seen.add(key)
            fw, att, arch = values["framework"], values["attention_kind"], values["gpu_arch"]
            for field_name, text in texts.items():
                text = " ".join(text) if field_name == "refs" else text
                for api in FORBIDDEN[fw]:
                    m = api.search(text)
                    if m:
                        bad.append(f"{rule.id} {field_name} for framework={fw}: names `{m.group(0)}`")
            if "is_causal=True" in texts["fix"] and att != "causal":
                bad.append(f"{rule.id} fix for attention_kind={att}: `is_causal=True` changes a non-causal model")
            if arch in PRE_AMPERE + ("unknown",) and NEWER_GPU_ONLY.search(texts["fix"]) and not OLDER_PATH.search(texts["fix"]):
                bad.append(f"{rule.id} fix for gpu_arch={arch} (framework={fw}): TF32/bf16 advice without the fp16 path")
    assert not bad, "\n".join(sorted(set(bad)))


# ------------------------------------------------------------------------------ the variant mechanism

def _pack(tmp_path, variants_yaml: str):
    (tmp_path / "team.yaml").write_text(f"""
tree: team
rules:
  - id: TEAM001
    name: step-over-budget
    title: The step is over budget
    category: step_budget
    severity: warning
    params: {{max_ms: 100}}
    when: {{all: [{{fact: step_time_ms_p50, op: gt, param: max_ms}}]}}
    message: "step {{step_time_ms_p50:.0f}} ms"
    fix: "base fix"
    verify: "base verify"
    verify_check: [{{fact: step_time_ms_p50, op: lt, param: max_ms}}]
{variants_yaml}""")
    return build_pack(None, [tmp_path / "team.yaml"], known_facts=catalogue())


def test_a_user_rule_selects_its_text_per_field_first_match_wins(tmp_path):
    pack = _pack(tmp_path, """    variants:
      - for: {framework: [cuda, openacc-openmp]}
        fix: "native fix"
      - for: {framework: cuda, gpu_arch: volta}
        fix: "never chosen: the first match wins"
        verify: "volta verify {gpu_arch_evidence}"
""")
    rule = pack.rules["TEAM001"]
    texts, used = rule.texts({"framework": "cuda", "gpu_arch": "volta"})
    assert (texts["fix"], texts["verify"], texts["message"]) == ("native fix", "volta verify {gpu_arch_evidence}",
                                                                 "step {step_time_ms_p50:.0f} ms")
    assert used == {"framework": "cuda", "gpu_arch": "volta"}
    texts, used = rule.texts({"framework": "pytorch", "gpu_arch": "volta"})
    assert (texts["fix"], used) == ("base fix", {})
    assert rule.texts({})[0]["fix"] == "base fix"  # an absent fact selects nothing


@pytest.mark.parametrize("variant, says", [
    ("      - for: {framwork: cuda}\n        fix: x", "unknown key `framwork`"),
    ("      - for: {framework: fortran}\n        fix: x", "`fortran` is not allowed"),
    ("      - for: {gpu_arch: volta}", "missing"),
    ("      - for: {framework: cuda}\n        fix: \"{no_such_fact}\"", "variant 1 fix uses unknown name(s) no_such_fact"),
])
def test_a_bad_variant_is_an_error_with_file_and_line(tmp_path, variant, says):
    with pytest.raises(RuleError) as e:
        _pack(tmp_path, "    variants:\n" + variant + "\n")
    assert says in str(e.value) and "team.yaml:" in str(e.value)


# ------------------------------------------------------------------------------ real files

def _program(paths) -> dict:
    facts = [f for _, fs in fact_blocks([str(p) for p in paths]) for f in fs]
    return {f.name: f.value for f in facts if f.subject is None}


@needs_shared
@pytest.mark.parametrize("path, framework, attention, arch", [
    ("ncar/MW_noasync.sqlite.gz", "openacc-openmp", None, "volta"),
    ("ncar/MW_Baseline.ncu-rep", "openacc-openmp", None, "volta"),
    ("tracelens/h100/facebook_timesformer-base-finetuned-k400__1016002.json.gz", "pytorch", "bidirectional", "hopper"),
    ("tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz", "pytorch", "bidirectional", "hopper"),
    ("kineto/jan2021/resnet50_num_workers_0/worker0.pt.trace.json.gz", "pytorch", None, "volta"),
    ("tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", "pytorch", "causal", "cdna"),
    ("tracelens/inference/vllm_decode_full/graph_execution.json.gz", "vllm", "causal", "cdna"),
    ("tracelens/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz", "sglang", "causal", "cdna"),
    ("nsys_sqlite/cudaperfsandbox_report1.sqlite.gz", "cuda", None, "ampere"),
    ("ncu_rep/esmm_profile_output.ncu-rep", "cuda", None, "ampere"),
])
def test_program_facts_on_real_files(path, framework, attention, arch):
    v = _program([EXT / path])
    assert (v["framework"], v.get("attention_kind"), v["gpu_arch"]) == (framework, attention, arch), v
    assert v["framework_evidence"] and v["gpu_arch_evidence"]
    assert (attention is None) == ("attention_evidence" not in v)


@needs_shared
def test_a_v100_without_device_properties_is_volta_by_its_kernel_names():
    v = _program([EXT / "kineto/jan2021/resnet50_num_workers_4/worker0.pt.trace.json.gz"])
    assert v["gpu_arch"] == "volta" and "volta_" in v["gpu_arch_evidence"]
    assert v["tensor_core_dtypes"] == "fp16"


def _texts(f) -> str:
    return "\n".join([f.title, f.message, f.fix, f.verify] + [k.message for k in f.kernels])


@needs_shared
@pytest.mark.parametrize("paths", [["ncar/MW_noasync.sqlite.gz"], ["ncar/MW_Baseline.ncu-rep"],
                                   ["ncar/MW_noasync.sqlite.gz", "ncar/MW_Baseline.ncu-rep"]])
def test_miniweather_gets_openacc_advice_and_no_pytorch_text(paths):
    r = diagnose([str(EXT / p) for p in paths])
    texts = "\n".join(_texts(f) for f in r.findings)
    assert r.findings and not PYTORCH_API.search(texts), PYTORCH_API.search(texts)
    assert "forward pass" not in texts and "torch" not in texts.lower()
    if "ncar/MW_noasync.sqlite.gz" in paths:
        sync = next(f for f in r.findings if f.category == "host_sync")
        assert "async(1)" in sync.fix and "!$acc wait(1)" in sync.fix, sync.fix
    if "ncar/MW_Baseline.ncu-rep" in paths:
        assert next(f for f in r.findings if f.rule == "KERN013").variant == {"framework": "openacc-openmp"}
    skipped = {n.rule for n in r.not_evaluated}
    assert not skipped & {"INFER015", "INFER016"}, "KV-cache rules listed as not evaluated for an OpenACC program"
    assert not any(n.tree == "inference-slow" for n in r.not_evaluated if len(paths) == 1 and paths[0].endswith("ncu-rep"))


@needs_shared
@pytest.mark.parametrize("path", ["tracelens/h100/facebook_timesformer-base-finetuned-k400__1016002.json.gz",
                                  "tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz"])
def test_bidirectional_encoders_get_an_attention_fix_that_keeps_their_mask(path):
    r = diagnose([str(EXT / path)])
    att = next(f for f in r.findings if f.category == "unfused_attention")
    assert "attn_mask=" in att.fix and "is_causal=True" not in att.fix, att.fix
    assert "bidirectional" in att.fix


@needs_shared
def test_a_causal_model_gets_is_causal():
    r = diagnose([str(SHARED / "corpus/torch/naive_attention.pt.trace.json.gz")])
    att = next(f for f in r.findings if f.category == "unfused_attention")
    assert "is_causal=True" in att.fix and att.variant == {"attention_kind": "causal"}


@needs_shared
@pytest.mark.parametrize("path", ["kineto/jan2021/resnet50_num_workers_0/worker0.pt.trace.json.gz",
                                  "kineto/jan2021/resnet50_num_workers_4/worker0.pt.trace.json.gz",
                                  "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"])
def test_v100_traces_get_fp16_and_gradscaler_advice(path):
    r = diagnose([str(EXT / path)])
    fp32 = [f for f in r.findings if f.category == "fp32_no_tensor_cores"]
    assert fp32, [f.rule for f in r.findings]
    for f in fp32:
        assert "GradScaler" in f.fix and "float16" in f.fix, f.fix
        assert "set_float32_matmul_precision" not in f.fix


def test_the_json_finding_names_its_variant(tmp_path):
    pack = _pack(tmp_path, "    variants:\n      - for: {framework: cuda}\n        fix: native\n")
    from diagnoser.engine.evaluate import make_finding
    from diagnoser.engine.records import Record
    f = make_finding(pack.rules["TEAM001"], Record("run", None, {"framework": "cuda", "step_time_ms_p50": 200.0}))
    assert f.fix == "native" and json.loads(json.dumps(f.to_json()))["variant"] == {"framework": "cuda"}
    assert "variant" not in make_finding(pack.rules["TEAM001"], Record("run", None, {"step_time_ms_p50": 200.0})).to_json()


# ------------------------------------------------------------------------------ synthetic names (edge cases)

@pytest.mark.parametrize("names, framework", [
    (["fusion_12", "loop_add_fusion", "wrapped_concatenate"], "jax-xla"),              # synthetic XLA names
    (["triton_poi_fused_add_0", "triton_red_fused_sum_1"], "pytorch"),                # torch.compile (Inductor)
    (["compute_tendencies_x_279_gpu", "reductions_939_gpu__red"], "openacc-openmp"),  # NVHPC regions
    (["__omp_offloading_fd00_1a2b_main_l42"], "openacc-openmp"),                      # synthetic OpenMP offload
    (["vllm::reshape_and_cache_kernel<float>"], "vllm"),
    (["myKernel(float*, int)"], "cuda"),
    (["ampere_sgemm_128x64_nn", "void cudnn::bn_fw_tr_1C11_singleread<float>"], None),  # libraries only
])
def test_framework_from_kernel_names(names, framework):
    from diagnoser.kernel_names import framework_from_kernel_names
    got = framework_from_kernel_names(names)
    assert (got[0] if got else None) == framework


@pytest.mark.parametrize("names, arch", [
    (["volta_sgemm_128x64_nt", "void at::native::f()"], "volta"),
    (["cutlass_75_tensorop_s1688gemm", "sm90_xmma_gemm_bf16bf16"], "hopper"),  # the newest wins: a lower bound
    (["nvjet_sm100_tst_256x128"], "blackwell"),
    (["Cijk_Alik_Bljk_HHS_BH_MT128x128"], "cdna"),
    (["void at::native::vectorized_elementwise_kernel<4>"], None),
])
def test_arch_from_kernel_names(names, arch):
    from diagnoser.kernel_names import arch_from_kernel_names
    got = arch_from_kernel_names(names)
    assert (got[0] if got else None) == arch


@pytest.mark.parametrize("name, cc, arch", [
    ("Tesla V100-SXM2-32GB", "7.0", "volta"), ("Tesla T4", "7.5", "turing"), ("NVIDIA A10G", "8.6", "ampere"),
    ("NVIDIA L4", "8.9", "ada"), ("NVIDIA H100 80GB HBM3", "9.0", "hopper"), ("NVIDIA B200", "10.0", "blackwell"),
    ("AMD Instinct MI300X", "9.4", "cdna"), ("", "9.4", "cdna"), ("", "", None),
])
def test_arch_of_device(name, cc, arch):
    from diagnoser.kernel_names import arch_of_device
    assert arch_of_device(name, cc) == arch
