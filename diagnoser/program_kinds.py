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

# what an op's dtype, shapes or strides say keeps it off its roof (timeline.roofline._cause): the per-op
# roofline rules' fix speaks of the cause measured, not of every cause
ROOFLINE_CAUSES = ("fp32", "unaligned", "skinny", "tiny", "strided", "none")

# the SM pipes Nsight Compute measures (ncu.units.PIPE_WORK says what each executes): a compute-bound
# kernel's fix is for its busiest pipe
SM_PIPES = ("tensor", "fma", "alu", "fp64", "xu", "lsu", "adu", "cbu", "uniform", "tex", "tma")

# the facts a rule's text variant may select on, and the values each may take
SELECTORS = {"framework": FRAMEWORKS, "workload_kind": WORKLOAD_KINDS, "attention_kind": ATTENTION_KINDS,
             "gpu_arch": GPU_ARCHS, "roofline_compute_gap_cause": ROOFLINE_CAUSES,
             "roofline_memory_gap_cause": ROOFLINE_CAUSES, "sm_busiest_pipe": SM_PIPES}

# facts about the program that any input may carry (a kernel report as well as a timeline): they never
# make a rule tree apply to an input by themselves (engine.evaluate.applicable)
PROGRAM_FACTS = ("framework", "attention_kind", "gpu_arch")
