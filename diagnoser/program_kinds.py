"""The values of the program facts (`framework`, `attention_kind`, `gpu_arch`, `workload_kind`):
what the analyses may say about the profiled program, and what a rule's text variants may select
on (docs/rules.md, Text variants). Imports nothing, so rule validation starts fast."""
from __future__ import annotations

FRAMEWORKS = ("pytorch", "jax-xla", "openacc-openmp", "cuda", "triton", "vllm", "sglang", "tensorrt-llm",
              "unknown")
SERVING_ENGINES = ("vllm", "sglang", "tensorrt-llm")  # serving engines (built on PyTorch but vLLM/SGLang/TRT-LLM)
ATTENTION_KINDS = ("causal", "bidirectional", "unknown")
# GPU generations, oldest first (NVIDIA by compute capability, AMD Instinct as CDNA)
GPU_ARCHS = ("kepler", "maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell", "cdna",
             "unknown")
PRE_AMPERE = ("kepler", "maxwell", "pascal", "volta", "turing")  # no TF32 or bf16 tensor cores
WORKLOAD_KINDS = ("training", "inference")

# the facts a rule's text variant may select on, and the values each may take
SELECTORS = {"framework": FRAMEWORKS, "workload_kind": WORKLOAD_KINDS, "attention_kind": ATTENTION_KINDS,
             "gpu_arch": GPU_ARCHS}

# facts about the program that any input may carry (a kernel report as well as a timeline): they never
# make a rule tree apply to an input by themselves (engine.evaluate.applicable)
PROGRAM_FACTS = ("framework", "attention_kind", "gpu_arch")
