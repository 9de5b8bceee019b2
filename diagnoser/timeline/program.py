"""Facts about the profiled program, measured from a timeline's evidence, each with the evidence that
decided it: which framework wrote it, what kind of attention it computes, which GPU generation ran it.

  framework         pytorch | jax-xla | openacc-openmp | cuda | triton | vllm | sglang | tensorrt-llm | unknown,
                    from the Python files the trace names (serving engines, JAX, Triton), the operators
                    (aten::), the profiler's annotations, the kernel names (NVHPC `<function>_<line>_gpu`,
                    at::native, torch.compile's triton_poi_...) and the API the host calls
  attention_kind    causal | bidirectional | unknown, only where the trace shows attention: triangular masks
                    (aten::triu / tril), causal-mask helpers and decoder KV caches say causal; encoder
                    models (their module and file names) and a softmax with no mask op around it say
                    bidirectional; a trace with both (a causal text tower beside a vision encoder) is
                    bidirectional, so that no advice drops a mask a part of the model needs
  gpu_arch          the generation (program_kinds.GPU_ARCHS): from the device properties, else from the
                    kernel names built for one generation (kernel_names.py), else unknown
Each has a `<fact>_evidence` string naming what decided it. Pure: reads the tables, O(n) in events.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..kernel_names import arch_from_kernel_names, arch_of_device, framework_from_kernel_names
from .tables import Timeline
from .names import lazy_pattern

_SERVING_FILES = (("vllm", re.compile(r"(^|/)vllm/")), ("sglang", re.compile(r"(^|/)sglang/")),
                  ("tensorrt-llm", re.compile(r"(^|/)tensorrt_llm/")))
_JAX = re.compile(r"(^|/)(jax|jaxlib|flax)/|^XlaModule|^Thunk:|^jit_")
_TRITON_FILES = lazy_pattern(r"(^|/)triton/runtime/")
_PYTORCH_ANNOTATIONS = lazy_pattern(r"^ProfilerStep#|^Optimizer\.step#|^enumerate\(DataLoader\)|^nn\.Module: ")
_ACC_API = lazy_pattern(r"^(acc_|__pgi_uacc|__nvhpc|omp_target|__tgt_)")

_ATTENTION_OPS = lazy_pattern(r"^aten::(_?softmax|scaled_dot_product|_scaled_dot_product|_flash_attention|"
                              r"_efficient_attention|_cudnn_attention)|^nn\.Module: \w*Attention", re.I)
_TRIANGULAR = re.compile(r"^aten::(triu|tril)_?$")
_MASK_OPS = re.compile(r"^aten::(masked_fill_?|where|triu|tril|_masked_softmax)$")
_CAUSAL_FRAMES = lazy_pattern(r"causal", re.I)  # HF's _make_causal_mask / _update_causal_mask / create_causal_mask
_KV_CACHE_FRAMES = lazy_pattern(r"(^|/)cache_utils\.py|past_key_value|DynamicCache|StaticCache|kv_cache")
_CAUSAL_MODELS = lazy_pattern(
    r"ForCausalLM|^(GPT2|GPTNeoX|GPTJ|Llama\d*|Qwen\d*(Moe)?|Mistral|Mixtral|Gemma\d*|Phi\d*|Falcon|Bloom|OPT|"
    r"Deepseek\w*|Olmo\d*)(Attention|DecoderLayer|Model|Block|SdpaAttention|FlashAttention2)", re.I)
_ENCODER_MODELS = lazy_pattern(
    r"^(Bert|Roberta|XLMRoberta|Deberta\w*|Electra|Albert|DistilBert|ViT|Vit|Deit|Beit|Swin\w*|Dinov2|Dino|"
    r"CLIPVision|ClipVision|Siglip\w*|Owlv2|OwlViT|Timesformer|TimeSformer|VideoMAE|Videomae|Wav2Vec2|Hubert|"
    r"Sam|Segformer|Detr|Blip\w*)\w*(Attention|Encoder|EncoderLayer|Layer)$|VisionTransformer$|VisionEncoder$", re.I)


DISTINCT_CHUNK = 1 << 16


def _distinct(table, column: str = "name", where=None) -> list[str]:
    """The distinct values of a column, in the order they first appear (a Categorical's from its codes: the
    first code of each run of equal codes, so 21M CUDA calls are not hashed one by one)."""
    col = table[column]
    if isinstance(col.dtype, pd.CategoricalDtype):  # (the codes of the rows `where` picks: no Series of them)
        codes = col.array.codes if where is None else col.array.codes[np.asarray(where, dtype=bool)]
        seen: dict[int, None] = {}
        for a in range(0, codes.size, DISTINCT_CHUNK):  # (a chunk at a time: hashed in tables of a chunk's size)
            chunk = codes[max(a - 1, 0):a + DISTINCT_CHUNK]
            head = np.ones(chunk.size, dtype=bool)
            np.not_equal(chunk[1:], chunk[:-1], out=head[1:])
            seen.update(dict.fromkeys(pd.unique(chunk[head]).tolist()))
        cats = col.cat.categories
        return [str(cats[c]) for c in seen if c >= 0]
    return [str(n) for n in (col if where is None else col[where]).dropna().unique()]


def _module(name: str) -> str:
    return re.sub(r"_\d+$", "", name[len("nn.Module: "):]) if name.startswith("nn.Module: ") else ""


def program_facts(tl: Timeline, values: dict) -> dict:
    """framework, attention_kind (where attention is found) and gpu_arch, each with its evidence."""
    r = tl.ranges
    kind = r["kind"]  # (compared as the Categorical it is: no object per range)
    ops = _distinct(r, where=(kind == "op").to_numpy()) if len(r) else []
    frames = _distinct(r, where=(kind == "python").to_numpy()) if len(r) else []
    marks = _distinct(r, where=((kind == "annotation") | (kind == "nvtx")).to_numpy()) if len(r) else []
    kernels = _distinct(tl.gpu, where=tl.gpu["kind"] == "kernel") if len(tl.gpu) else []
    api = _distinct(tl.host) if len(tl.host) else []
    out = dict(zip(("framework", "framework_evidence"), _framework(tl, ops, frames, marks, kernels, api)))
    out.update(zip(("gpu_arch", "gpu_arch_evidence"), gpu_arch(tl.devices, kernels)))
    att = _attention(ops, frames, marks, kernels, values, out["framework"])
    if att is not None:
        out["attention_kind"], out["attention_evidence"] = att
    return out


def _framework(tl: Timeline, ops, frames, marks, kernels, api) -> tuple[str, str]:
    for name, pattern in _SERVING_FILES:
        hit = next((f for f in frames if pattern.search(f)), None)
        if hit:
            return name, f"Python frames in {name}'s code (e.g. {_cut(hit)})"
    aten = [o for o in ops if o.startswith("aten::")]
    jax = next((n for n in frames + marks if _JAX.search(n)), None)
    if jax and not aten:
        return "jax-xla", f"JAX/XLA evidence ({_cut(jax)}) and no PyTorch operators"
    if aten:
        return "pytorch", f"{len(aten)} distinct PyTorch operators (e.g. {aten[0]})"
    if tl.source == "torch" or any(_PYTORCH_ANNOTATIONS().search(m) for m in marks):
        by_names = framework_from_kernel_names(kernels)
        if by_names and by_names[0] in ("vllm", "sglang", "tensorrt-llm"):
            return by_names
        return "pytorch", "a PyTorch profiler trace" + (f"; {by_names[1]}" if by_names else "")
    triton = next((f for f in frames if _TRITON_FILES().search(f)), None)
    if triton:
        return "triton", f"Triton's launcher in the Python frames ({_cut(triton)}) and no PyTorch operators"
    by_names = framework_from_kernel_names(kernels)
    acc = next((a for a in api + marks if _ACC_API().search(a)), None)
    host = _api_text(api)
    if acc and (by_names is None or by_names[0] in ("cuda", "openacc-openmp")):
        return "openacc-openmp", f"OpenACC/OpenMP runtime calls ({acc}){host}"
    if by_names is not None:
        framework, evidence = by_names
        return framework, evidence + (host if framework in ("cuda", "openacc-openmp") else "")
    if kernels:
        return "unknown", "library kernels only (cuBLAS/cuDNN...), no operators or annotations" + host
    return "unknown", "no kernels, operators or annotations name the program"


def _api_text(api: list[str]) -> str:
    runtime = sorted(a for a in api if a.startswith(("cuda", "hip")))
    driver = sorted(a for a in api if a.startswith("cu") and not a.startswith("cuda"))
    if runtime:
        return f"; CUDA runtime calls ({', '.join(runtime[:3])}), no framework operators"
    return f"; the CUDA driver API alone ({', '.join(driver[:3])}), no framework operators" if driver else ""


def gpu_arch(devices: list[dict], kernels) -> tuple[str, str]:
    """(generation, evidence): the device properties first, then the kernel names, else unknown."""
    for d in devices:
        arch = arch_of_device(d.get("name", ""), d.get("cc", ""))
        if arch:
            return arch, f"device properties: {d.get('name') or 'device ' + str(d.get('id', 0))}" \
                         f"{', compute capability ' + str(d.get('cc')) if d.get('cc') else ''}"
    by_names = arch_from_kernel_names(kernels)
    if by_names:
        return by_names
    return "unknown", "no device properties and no generation-specific kernel names"


def _attention(ops, frames, marks, kernels, values: dict, framework: str) -> tuple[str, str] | None:
    names = ops + marks
    found = (values.get("fused_attention_pct", 0) or 0) > 0 or (values.get("unfused_attention_blocks_per_step", 0) or 0) > 0 \
        or any(_ATTENTION_OPS().search(n) for n in names)
    if not found:
        return None
    modules = sorted({m for m in (_module(n) for n in marks + frames) if m})
    causal, bidir = [], []
    tri = [o for o in ops if _TRIANGULAR.search(o)]
    if tri:
        causal.append(f"triangular mask ops ({', '.join(tri)})")
    helper = next((f for f in frames if _CAUSAL_FRAMES().search(f.split(": ")[-1])), None)
    if helper:
        causal.append(f"causal-mask code ({_cut(helper)})")
    cache = next((f for f in frames if _KV_CACHE_FRAMES().search(f)), None)
    if values.get("kv_cache_paged") or cache or framework in ("vllm", "sglang", "tensorrt-llm"):
        causal.append("a decoder KV cache (" + (_cut(cache) if cache else "paged KV kernels" if values.get("kv_cache_paged")
                                                else f"{framework} serving") + ")")
    dec = [m for m in modules if _CAUSAL_MODELS().search(m)]
    if dec:
        causal.append(f"decoder modules ({', '.join(dec[:2])})")
    enc = [m for m in modules if _ENCODER_MODELS().search(m)]
    if enc:
        bidir.append(f"encoder modules ({', '.join(enc[:2])})")
    masks = sorted({o for o in ops if _MASK_OPS.search(o)})
    if bidir:
        kept = f"; mask ops {', '.join(masks)}" if masks else "; no mask op"
        also = f"; also {'; '.join(causal)}: a causal part beside a bidirectional one" if causal else ""
        return "bidirectional", "; ".join(bidir) + kept + also
    if causal:
        return "causal", "; ".join(causal)
    softmax = [o for o in ops if re.match(r"^aten::_?softmax$", o)]
    if softmax and not masks:
        return "bidirectional", f"{softmax[0]} with no mask op (triu/tril/masked_fill/where) around it"
    return "unknown", ("attention kernels or operators, but nothing says whether it is causal"
                       + (f" (mask ops: {', '.join(masks)})" if masks else ""))


def _cut(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"
